"""The second edition's page says what its own tables say (issue 34): every level and paired difference of the pooled
tables in docs/results/README.md is recomputed from the committed runs.csv and pairs.csv, and the sentence listing
the tree-vs-tree gaps that survive Holm is generated from pairs.csv (`python tests/test_results_page.py` prints it).

Levels are the tables' one definition of a cell: the mean over prompts of per-prompt expected block efficiency
(`expected_block_efficiency_prompt_mean` per run; the sets have 48 prompts each, so a pooled level is the mean of
the per-set runs')."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
V3 = ROOT / "docs" / "results" / "embedded-v3"
PAGE = ROOT / "docs" / "results" / "README.md"
LABELS = {"SD": "sd", "BV": "bv", "PLD": "pld", "SpecInfer": "specinfer", "SpecTr": "spectr", "RSD-C": "rsd_c",
          "TV": "tv", "RSD-S": "rsd_s"}
TREE = ("specinfer", "spectr", "rsd_c", "tv", "rsd_s")
SETS = {"dolly_builtin": "Dolly-style", "xsum_builtin": "XSum-style", "wmt_builtin": "WMT-style"}
MINUS = "\u2212"


def read(name: str) -> pd.DataFrame:
    return pd.read_csv(V3 / name, keep_default_na=False)


def signed(value: float, places: int) -> str:
    text = f"{value:+.{places}f}"
    return text.replace("-", MINUS)


def difference(pairs: pd.DataFrame, first: str, second: str, places: int = 3) -> tuple[str, float]:
    """'+0.164 (+0.131, +0.198)' for first − second in the one row of `pairs` comparing them, and its Holm p."""
    rows = pairs[(pairs["kind"] == "best shape") & (((pairs["first"] == first) & (pairs["second"] == second))
                                                   | ((pairs["first"] == second) & (pairs["second"] == first)))]
    [row] = [r for _, r in rows.iterrows()]
    sign = 1 if row["first"] == first else -1
    mean, low, high = (sign * float(row[f"expected_block_efficiency_{k}"]) for k in ("diff", "low", "high"))
    low, high = min(low, high), max(low, high)
    return (f"{signed(mean, places)} ({signed(low, places)}, {signed(high, places)})",
            float(row["expected_block_efficiency_p_holm"]))


def level(runs: pd.DataFrame, method: str) -> str:
    values = runs.loc[runs["method"] == method, "expected_block_efficiency_prompt_mean"].astype(float)
    assert len(values), method
    return f"{values.mean():.2f}"


def grid(frame: pd.DataFrame, temperature: float, budget: str, x: int, mix: str = "") -> pd.DataFrame:
    return frame[(frame["temperature"].astype(float) == temperature) & (frame["budget"] == budget)
                 & (frame["x"].astype(str) == str(x)) & (frame["mix"].astype(str) == mix)]


def table(header: str) -> list[list[str]]:
    """The rows (cells stripped, bold removed) of the page's table whose header line starts with `header`."""
    lines = PAGE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip().replace("**", "") for c in line.strip("|").split("|")])
    return rows


def check_cell(cell: str, expected: str, p_holm: float) -> None:
    text, _, holm = cell.partition(", Holm ")
    assert text == expected
    if holm:
        assert (p_holm < 0.001) if holm == "< 0.001" else float(holm) == pytest.approx(p_holm, abs=0.5 * 10.0
                                                                                           ** -len(holm.split(".")[-1]))


def check_fixed_length(header: str, temperature: float, pooled: str) -> None:
    runs, pairs = read("runs.csv"), read("pairs.csv")
    columns = [c.strip() for c in header.strip("|").split("|")]
    for row in table(header):
        x = int(row[0])
        here_runs = grid(runs[runs["selection_role"] != "tune"], temperature, "fixed_length", x)
        here_pairs = grid(pairs[pairs["dataset"] == pooled], temperature, "fixed_length", x)
        for name, cell in zip(columns[1:], row[1:]):
            if MINUS in name:
                first, second = (LABELS[part.strip()] for part in name.split(MINUS))
                check_cell(cell, *difference(here_pairs, first, second))
            else:
                assert cell == level(here_runs, LABELS[name]), (x, name)


def test_fixed_length_t1_pooled_table():
    check_fixed_length("| L | SD | SpecTr | RSD-C | RSD-S | SpecTr − SD | RSD-C − SpecTr | RSD-S − RSD-C |", 1.0,
                       "dolly_builtin+wmt_builtin+xsum_builtin")


def test_fixed_length_t06_pooled_table():
    check_fixed_length("| L | SD | SpecTr | RSD-C | RSD-S | SpecTr − SD | RSD-C − SpecTr | RSD-S − RSD-C | "
                       "RSD-S − SpecTr |", 0.6, "dolly_builtin+xsum_builtin")


def test_fixed_compute_pooled_tables():
    runs, pairs = read("runs.csv"), read("pairs.csv")
    evaluated = runs[runs["selection_role"] == "eval"]
    header = "| method | B = 6 | B = 10 | B = 14 | B = 21 | B = 30 |"
    points = [int(c.split("=")[1]) for c in header.strip("|").split("|")[1:]]
    for row in table(header):
        for x, cell in zip(points, row[1:]):
            assert cell == level(grid(evaluated, 1.0, "fixed_compute", x), LABELS[row[0]]), (row[0], x)
    header = "| B | RSD-S − SpecTr | RSD-C − SpecTr | RSD-S − RSD-C |"
    pooled = pairs[pairs["dataset"] == "dolly_builtin+wmt_builtin+xsum_builtin"]
    for row in table(header):
        for name, cell in zip(header.strip("|").split("|")[1:], row[1:]):
            first, second = (LABELS[part.strip()] for part in name.split(MINUS))
            check_cell(cell, *difference(grid(pooled, 1.0, "fixed_compute", int(row[0])), first, second))


def test_dial_table():
    runs, pairs = read("runs.csv"), read("pairs.csv")
    header = "| budget | a | SD's acceptance | SD | SpecInfer − SD |"
    columns = [c.strip() for c in "| budget | a | SD's acceptance | SD | SpecInfer − SD | SpecTr − SD | RSD-C − SD | "
               "RSD-S − SD |".strip("|").split("|")]
    for row in table(header):
        budget, x = ("fixed_length", 4) if row[0] == "L = 4" else ("fixed_compute", 14)
        here_runs = grid(runs, 1.0, budget, x, row[1])
        assert row[3] == level(here_runs, "sd"), row[:2]
        for name, cell in zip(columns[4:], row[4:]):
            first = LABELS[name.split(MINUS)[0].strip()]
            check_cell(cell, difference(grid(pairs, 1.0, budget, x, row[1]), first, "sd", places=2)[0], 1.0)


def surviving_tree_gaps() -> str:
    """The sentence of the page (and the README) listing every fixed-length tree-vs-tree gap that survives Holm."""
    pairs = read("pairs.csv")
    tree = pairs[(pairs["kind"] == "best shape") & (pairs["budget"] == "fixed_length") & (pairs["mix"] == "")
                 & pairs["first"].isin(TREE) & pairs["second"].isin(TREE)]
    found = tree[tree["expected_block_efficiency_p_holm"].astype(float) < 0.05]
    names = {v: k for k, v in LABELS.items()}
    parts = []
    for _, row in found.sort_values(["temperature", "dataset", "x"], ascending=[False, True, True]).iterrows():
        where = "pooled" if "+" in row["dataset"] else SETS[row["dataset"]]
        parts.append(f"{where}, T = {float(row['temperature']):g}, L = {row['x']}: {names[row['first']]} {MINUS} "
                     f"{names[row['second']]} {signed(float(row['expected_block_efficiency_diff']), 3)} "
                     f"(Holm p = {float(row['expected_block_efficiency_p_holm']):.3f})")
    lead = f"The tree-vs-tree gaps that survive Holm in the fixed-length grids ({len(parts)}): "
    return (lead + "; ".join(parts) + "." if parts else "No tree-vs-tree gap survives Holm in the fixed-length grids.")


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_surviving_gaps_sentence_is_the_tables():
    sentence = surviving_tree_gaps()
    assert "grids (3): " in sentence  # the three the independent recomputation found
    for path in (PAGE, ROOT / "README.md"):
        assert sentence in flat(path.read_text()), path
    page = flat(PAGE.read_text())
    for stale in ("no gap between tree methods is significant", "No gap between two tree methods is significant",
                  "no tree-vs-tree gap survives Holm |"):
        assert stale not in page


if __name__ == "__main__":
    print(surviving_tree_gaps())
