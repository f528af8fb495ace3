"""Decode token rate of every method relative to AR on the same prompt, pooled over prompt sets: the geometric mean
of the per-prompt ratios with its 95% CI (a paired t interval on log rates) and the Holm-adjusted p of "ratio = 1"
over every cell. The per-set tables with SEs are the report's table_token_rate_ratio.md; this is the pooled view
docs/results/README.md quotes for the quiet token-rate pass:

    python experiments/rate_ratios.py results/study/embedded-v3-rates
"""

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.columns import AR_KEYS
from analysis.load import load
from analysis.names import METHODS, method_label
from analysis.stats import holm, paired


def rate_ratios(prompts: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, budget point): prompts, ratio, low, high, p, p_holm; each prompt paired with the AR run
    of its own setting and seed (AR_KEYS), so prompt sets are pooled only through paired ratios."""
    keys = [k for k in AR_KEYS if k in prompts.columns]
    ar = prompts[prompts["method"] == "ar"][[*keys, "prompt_id", "decode_token_rate"]]
    drafted = prompts[prompts["method"] != "ar"].merge(ar, on=[*keys, "prompt_id"], suffixes=("", "_ar"))
    rows = []
    for (method, x), group in drafted.groupby(["method", "x"]):
        test = paired(np.log(group["decode_token_rate"]), np.log(group["decode_token_rate_ar"]))
        rows.append({"method": method, "x": int(x), "prompts": test.n, "ratio": math.exp(test.mean),
                     "low": math.exp(test.low), "high": math.exp(test.high), "p": test.p})
    table = pd.DataFrame(rows)
    table["p_holm"] = holm(table["p"])
    order = {m: i for i, m in enumerate(METHODS)}
    return table.sort_values(["method", "x"], key=lambda c: c.map(order).fillna(len(order)) if c.name == "method"
                             else c, ignore_index=True)


def markdown(table: pd.DataFrame) -> str:
    """Methods as rows, budget points as columns; cells `ratio (low, high)`, `*` where Holm p < 0.05."""
    xs = sorted(table["x"].unique())
    lines = ["| method | " + " | ".join(f"x = {x}" for x in xs) + " |", "|---|" + "---:|" * len(xs)]
    for method, group in table.groupby("method", sort=False):
        cells = {r.x: f"{r.ratio:.2f} ({r.low:.2f}, {r.high:.2f}){'*' if r.p_holm < 0.05 else ''}"
                 for r in group.itertuples()}
        lines.append(f"| {method_label(method)} | " + " | ".join(cells.get(x, "") for x in xs) + " |")
    n = int(table["prompts"].max())
    note = f"{n} prompts per cell; * differs from 1 with Holm p < 0.05 over the {len(table)} cells."
    return "\n".join(lines) + "\n\n" + note


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="+", type=Path, help="out_dirs (or run directories) holding the runs")
    args = ap.parse_args(argv)
    try:
        prompts = load(args.roots).prompts
    except (FileNotFoundError, ValueError) as err:  # a missing root, or no complete run under it
        ap.exit(2, f"rate_ratios: {err}\n")
    if not (prompts["method"] == "ar").any():
        ap.exit(2, f"rate_ratios: no AR run under {', '.join(map(str, args.roots))}: nothing to take ratios to\n")
    print(markdown(rate_ratios(prompts)))


if __name__ == "__main__":
    main()
