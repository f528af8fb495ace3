"""Decode token rate of every method relative to AR on the same prompt, pooled over prompt sets: per temperature and
budget point, the geometric mean of the per-prompt ratios with its 95% CI (a paired t interval on log rates) and the
Holm-adjusted p of "ratio = 1" over the cells of that temperature (each temperature is its own table of questions).
The per-set tables with SEs are the report's table_token_rate_ratio.md; this is the pooled view the studies quote:

    python -m analysis.rates results/study/embedded-eagle-rates
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.columns import AR_KEYS
from analysis.load import load
from analysis.names import METHODS, method_label
from analysis.stats import ALPHA, holm, paired


def rate_ratios(prompts: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (temperature, method, budget point): prompts, ratio, low, high, p, p_holm; each prompt paired with
    the AR run of its own setting and seed (AR_KEYS), so prompt sets are pooled only through paired ratios. With
    `runs`, each row also carries the 1-minute load range at the start of its temperature's runs and the CPU count."""
    prompts = prompts if "temperature" in prompts else prompts.assign(temperature=math.nan)
    keys = [k for k in AR_KEYS if k in prompts.columns]
    ar = prompts[prompts["method"] == "ar"][[*keys, "prompt_id", "decode_token_rate"]]
    drafted = prompts[prompts["method"] != "ar"].merge(ar, on=[*keys, "prompt_id"], suffixes=("", "_ar"))
    rows = []
    for (temperature, method, x), group in drafted.groupby(["temperature", "method", "x"], dropna=False):
        test = paired(np.log(group["decode_token_rate"]), np.log(group["decode_token_rate_ar"]))
        rows.append({"temperature": temperature, "method": method, "x": int(x), "prompts": test.n,
                     "ratio": math.exp(test.mean), "low": math.exp(test.low), "high": math.exp(test.high),
                     "p": test.p})
    table = pd.DataFrame(rows)
    table["p_holm"] = table.groupby("temperature", dropna=False)["p"].transform(holm) if len(table) else []
    if runs is not None and len(table):
        timing = runs.assign(machine=[machine_words(Path(d)) for d in runs["run_dir"]]).groupby(
            "temperature", dropna=False).agg(load_low=("load_average", "min"), load_high=("load_average", "max"),
                                             cpus=("cpu_count", "max"),
                                             machine=("machine", lambda m: "; ".join(sorted(set(m)))))
        table = table.merge(timing, left_on="temperature", right_index=True, how="left")
    order = {m: i for i, m in enumerate(METHODS)}
    return table.sort_values(["temperature", "method", "x"], key=lambda c: c.map(order).fillna(len(order))
                             if c.name == "method" else c, ignore_index=True)


def machine_words(run_dir: Path) -> str:
    """What a run was timed on, from its run.json: 'torch 2.13.0+cpu, 1 torch thread, CPU flags avx2'."""
    env = json.loads((run_dir / "run.json").read_text()).get("environment", {})
    flags = ", ".join(env.get("cpu_flags") or []) or "none recorded"
    return f"torch {env.get('torch', '?')}, {env.get('torch_threads', '?')} torch thread(s), CPU flags {flags}"


def verdict(row: pd.Series) -> str:
    """'faster' or 'slower' than AR where Holm p < ALPHA, else 'undecided'."""
    if not row["p_holm"] < ALPHA:
        return "undecided"
    return "faster" if row["ratio"] > 1 else "slower"


def point(x: int) -> str:
    return f"L = {x}"


def temperature_words(temperature: float) -> str:
    return "T = ?" if not np.isfinite(temperature) else f"T = {temperature:g}"


def markdown(table: pd.DataFrame) -> str:
    """Per temperature: methods as rows, budget points as columns; cells `ratio (low, high)`, `*` where Holm
    p < 0.05 over that temperature's cells."""
    out = []
    for temperature, cells_t in table.groupby("temperature", sort=True, dropna=False):
        xs = sorted(cells_t["x"].unique())
        lines = [f"**{temperature_words(temperature)}**", "",
                 "| method | " + " | ".join(point(x) for x in xs) + " |", "|---|" + "---:|" * len(xs)]
        for method, group in cells_t.groupby("method", sort=False):
            cells = {r.x: f"{r.ratio:.2f} ({r.low:.2f}, {r.high:.2f}){'*' if r.p_holm < ALPHA else ''}"
                     for r in group.itertuples()}
            lines.append(f"| {method_label(method)} | " + " | ".join(cells.get(x, "") for x in xs) + " |")
        n = int(cells_t["prompts"].max())
        lines += ["", f"{n} prompts per cell; * differs from 1 with Holm p < 0.05 over the {len(cells_t)} cells of "
                      f"{temperature_words(temperature)}."]
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def cell_words(row: pd.Series) -> str:
    ratio = f"{row['ratio']:.2f} ({row['low']:.2f}, {row['high']:.2f})"
    return f"{method_label(row['method'])} at {point(row['x'])} {ratio}"


def sentence(table: pd.DataFrame) -> str:
    """Per temperature: how many cells are faster than AR, slower, undecided (Holm), the faster ones named, else the
    best cell; and the load the timings were taken at, when the table carries it."""
    parts = []
    for temperature, cells in table.groupby("temperature", sort=True, dropna=False):
        verdicts = cells.apply(verdict, axis=1)
        faster = cells[verdicts == "faster"].sort_values("ratio", ascending=False)
        counts = (f"{len(faster)} of {len(cells)} cells faster than AR, {int((verdicts == 'slower').sum())} slower, "
                  f"{int((verdicts == 'undecided').sum())} undecided (Holm p < 0.05)")
        if len(faster):
            named = "faster: " + ", ".join(cell_words(r) for _, r in faster.iterrows())
        else:
            named = "the highest ratio is " + cell_words(cells.loc[cells["ratio"].idxmax()])
        load = ""
        if {"load_low", "load_high"} <= set(cells.columns) and np.isfinite(cells["load_low"]).any():
            cpus = f" on {int(cells['cpus'].max())} CPUs" if np.isfinite(cells["cpus"]).any() else ""
            load = (f"; timed at 1-minute load {cells['load_low'].min():.2f}-{cells['load_high'].max():.2f}{cpus} "
                    f"({cells['machine'].iloc[0]})")
        parts.append(f"At {temperature_words(temperature)}: {counts}; {named}{load}.")
    return " ".join(parts)


def step_costs(runs: pd.DataFrame) -> pd.DataFrame:
    """Why a ratio is what it is, per (temperature, method, budget point), every set's runs summed: block efficiency
    (tokens per target call), drafted tokens checked per call, and the time of one step (a target call with its drafting
    and the rest) in AR steps (AR's time per token at that temperature). A method beats AR exactly when its block
    efficiency exceeds its step's cost in AR steps (both ratios of sums, prefill included)."""
    frame = runs.assign(step_s=runs["time_target_s"] + runs["time_draft_s"] + runs["time_other_s"])
    sums = frame.groupby(["temperature", "method", "x"], dropna=False)[
        ["new_tokens", "target_calls", "time_target_s", "time_draft_s", "step_s"]].sum()
    verified = frame.assign(verified=frame["tokens_verified_per_call"] * frame["target_calls"]).groupby(
        ["temperature", "method", "x"], dropna=False)["verified"].sum()
    ar = sums.xs("ar", level="method").groupby(level="temperature", dropna=False).sum()
    ar_step = (ar["step_s"] / ar["new_tokens"]).rename("ar_step_s")
    rows = sums.drop(index="ar", level="method").reset_index().merge(ar_step, left_on="temperature",
                                                                     right_index=True)
    per_call = rows["target_calls"] * rows["ar_step_s"]
    out = pd.DataFrame({
        "temperature": rows["temperature"], "method": rows["method"], "x": rows["x"].astype(int),
        "block_efficiency": rows["new_tokens"] / rows["target_calls"],
        "tokens_verified_per_call": verified.drop(index="ar", level="method").to_numpy() / rows["target_calls"],
        "target_cost": rows["time_target_s"] / per_call, "draft_cost": rows["time_draft_s"] / per_call,
        "step_cost": rows["step_s"] / per_call})
    out["ratio"] = out["block_efficiency"] / out["step_cost"]
    order = {m: i for i, m in enumerate(METHODS)}
    return out.sort_values(["temperature", "method", "x"], key=lambda c: c.map(order).fillna(len(order))
                           if c.name == "method" else c, ignore_index=True)


def costs_markdown(costs: pd.DataFrame) -> str:
    """Per temperature: methods as rows, budget points as columns; cells `BE / step cost (target + draft)`."""
    out = []
    for temperature, cells_t in costs.groupby("temperature", sort=True, dropna=False):
        xs = sorted(cells_t["x"].unique())
        lines = [f"**{temperature_words(temperature)}** (block efficiency / a step's cost in AR steps, of it target "
                 "call + drafting)", "",
                 "| method | " + " | ".join(point(x) for x in xs) + " |", "|---|" + "---:|" * len(xs)]
        for method, group in cells_t.groupby("method", sort=False):
            cells = {r.x: f"{r.block_efficiency:.2f} / {r.step_cost:.2f} ({r.target_cost:.2f} + {r.draft_cost:.2f})"
                     for r in group.itertuples()}
            lines.append(f"| {method_label(method)} | " + " | ".join(cells.get(x, "") for x in xs) + " |")
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def costs_sentence(costs: pd.DataFrame) -> str:
    """Per temperature: the range of block efficiency against the range of step costs, and in how many cells the
    first exceeds the second (a method faster than AR in the sum over prompts)."""
    parts = []
    for temperature, cells in costs.groupby("temperature", sort=True, dropna=False):
        drafted = cells[cells["draft_cost"] > 0]
        ahead = int((cells["block_efficiency"] > cells["step_cost"]).sum())
        checked, cost = cells["tokens_verified_per_call"], cells["target_cost"]
        target = (f"a target call that checks {checked.min():.1f}-{checked.max():.1f} drafted tokens costs "
                  f"{cost.min():.2f}-{cost.max():.2f} AR steps")
        draft = (f", drafting adds {drafted['draft_cost'].min():.2f}-{drafted['draft_cost'].max():.2f}"
                 if len(drafted) else "")
        parts.append(f"At {temperature_words(temperature)}: {target}{draft}, so a step costs "
                     f"{cells['step_cost'].min():.2f}-{cells['step_cost'].max():.2f} AR steps and returns "
                     f"{cells['block_efficiency'].min():.2f}-{cells['block_efficiency'].max():.2f} tokens; "
                     f"the tokens exceed the cost in {ahead} of {len(cells)} cells.")
    return " ".join(parts)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m analysis.rates", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="+", type=Path, help="out_dirs (or run directories) holding the runs")
    args = ap.parse_args(argv)
    try:
        tables = load(args.roots)
    except (FileNotFoundError, ValueError) as err:  # a missing root, or no complete run under it
        ap.exit(2, f"analysis.rates: {err}\n")
    if not (tables.prompts["method"] == "ar").any():
        ap.exit(2, f"analysis.rates: no AR run under {', '.join(map(str, args.roots))}: nothing to take ratios to\n")
    table, costs = rate_ratios(tables.prompts, tables.runs), step_costs(tables.runs)
    print(markdown(table) + "\n" + sentence(table) + "\n\n" + costs_markdown(costs) + "\n" + costs_sentence(costs))


if __name__ == "__main__":
    main()
