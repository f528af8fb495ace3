"""analysis/rates.py over several cells: the p values and the table's marks are Holm-adjusted over them all."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis import rates as rate_ratios
from analysis.stats import holm

AR_RATE = 20.0
# per-prompt log(rate / AR rate) of three cells: clearly faster, p = 0.027 alone (not after Holm over 3), no change
LOG_RATIOS = {("sd", 2): [0.5, 0.52, 0.48, 0.51, 0.49, 0.5],
              ("sd", 4): [0.3, 0.05, 0.2, 0.0, 0.25, 0.1],
              ("rsd_c", 4): [0.1, -0.1, 0.05, -0.05, 0.02, -0.02]}


def prompts() -> pd.DataFrame:
    rows = []
    table = {"dataset": "d", "prompt_set": "p", "temperature": 1.0}
    for i in range(6):
        rows.append({**table, "prompt_id": f"p{i}", "method": "ar", "x": math.nan, "decode_token_rate": AR_RATE})
        for (method, x), logs in LOG_RATIOS.items():
            rows.append({**table, "prompt_id": f"p{i}", "method": method, "x": x,
                         "decode_token_rate": AR_RATE * math.exp(logs[i])})
    return pd.DataFrame(rows)


def test_p_values_and_marks_are_holm_adjusted_over_every_cell() -> None:
    """Holm over 3 cells: adj = 3 p_(1), max(that, 2 p_(2)), max(that, p_(3)); a cell with p = 0.027 alone is not
    marked, since 2 x 0.027 > 0.05, and the clearly faster one is."""
    table = rate_ratios.rate_ratios(prompts()).set_index(["method", "x"])
    raw = {cell: float(stats.ttest_1samp(logs, 0.0).pvalue) for cell, logs in LOG_RATIOS.items()}
    assert [table.loc[cell, "p"] for cell in LOG_RATIOS] == pytest.approx(list(raw.values()), rel=1e-9)
    first = 3 * raw[("sd", 2)]
    second = max(first, 2 * raw[("sd", 4)])
    third = max(second, min(1.0, raw[("rsd_c", 4)]))
    assert raw[("sd", 4)] < 0.05 < second
    np.testing.assert_allclose([table.loc[cell, "p_holm"] for cell in LOG_RATIOS], [first, second, third], rtol=1e-9)
    lines = rate_ratios.markdown(rate_ratios.rate_ratios(prompts())).strip().splitlines()
    cells = {row[0]: row[1:] for row in ([c.strip() for c in line.strip("|").split("|")] for line in lines[4:6])}
    assert lines[2].startswith("| method | L = 2 | L = 4 |") and set(cells) == {"SD", "RSD-C"}
    assert cells["SD"][0].endswith(")*") and cells["SD"][1].endswith(")")  # x = 2 marked, x = 4 not
    assert cells["RSD-C"] == ["", cells["RSD-C"][1]] and "*" not in cells["RSD-C"][1]
    assert "Holm p < 0.05 over the table's 3 cells" in lines[-1]


def test_each_temperature_is_its_own_holm_family_and_sentence() -> None:
    """The same cells at two temperatures: each temperature's p-values are adjusted over its own 3 cells only, and
    the generated sentence counts and names each temperature's faster cells from the table."""
    table = rate_ratios.rate_ratios(pd.concat([prompts().assign(temperature=t) for t in (0.0, 1.0)]))
    assert len(table) == 6
    for _, cells in table.groupby("temperature"):
        np.testing.assert_allclose(cells["p_holm"], holm(cells["p"]))
    words = rate_ratios.sentence(table)
    assert words.count("1 of 3 cells (1 table(s)) faster than AR, 0 slower, 2 undecided") == 2
    assert "At T = 0: " in words and "At T = 1: " in words and "faster: SD at L = 2 on d (p) 1.65 (" in words
