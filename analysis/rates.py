"""Decode token rate of every method relative to AR on the same prompt, per prompt set and temperature (a table; sets
are never pooled): per budget point, the geometric mean of the per-prompt ratios with its 95% CI (a paired t interval
on log rates) and the Holm-adjusted p of "ratio = 1" over the cells of its table; and the step costs that explain
the ratios. The studies quote it:

    python -m analysis.rates results/study/embedded-eagle-rates
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.columns import AR_KEYS
from analysis.load import load
from analysis.names import METHODS, method_label
from analysis.rows import environment
from analysis.stats import ALPHA, holm, paired

TABLE = ["dataset", "prompt_set", "temperature"]  # one table of questions (Holm over its cells)


def rate_ratios(prompts: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (dataset, temperature, method, budget point): prompts, ratio, low, high, p, p_holm; each prompt
    paired with the AR run of its own setting and seed (AR_KEYS). With `runs`, each row also carries the 1-minute
    load range at the start of its table's runs, the CPU count and what the runs were timed on."""
    keys = [k for k in AR_KEYS if k in prompts.columns]
    ar = prompts[prompts["method"] == "ar"][[*keys, "prompt_id", "decode_token_rate"]]
    drafted = prompts[prompts["method"] != "ar"].merge(ar, on=[*keys, "prompt_id"], suffixes=("", "_ar"))
    rows = []
    for (dataset, prompt_set, temperature, method, x), group in drafted.groupby([*TABLE, "method", "x"],
                                                                                 dropna=False):
        test = paired(np.log(group["decode_token_rate"]), np.log(group["decode_token_rate_ar"]))
        rows.append({"dataset": dataset, "prompt_set": prompt_set, "temperature": temperature, "method": method,
                     "x": int(x), "prompts": test.n,
                     "ratio": math.exp(test.mean), "low": math.exp(test.low), "high": math.exp(test.high),
                     "p": test.p})
    table = pd.DataFrame(rows)
    table["p_holm"] = table.groupby(TABLE, dropna=False)["p"].transform(holm) if len(table) else []
    if runs is not None and len(table):
        timed = runs.assign(machine=[machine_words(Path(d)) for d in runs["run_dir"]])
        timing = timed.groupby(TABLE, dropna=False).agg(
            load_low=("load_average", "min"), load_high=("load_average", "max"), cpus=("cpu_count", "max"),
            machine=("machine", lambda m: "; ".join(sorted(set(m)))))
        table = table.merge(timing, left_on=TABLE, right_index=True, how="left")
    return in_order(table)


def in_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Sorted by temperature, dataset, prompt set, method (the built-ins' order) and budget point."""
    order = {m: i for i, m in enumerate(METHODS)}
    return frame.sort_values(["temperature", "dataset", "prompt_set", "method", "x"], ignore_index=True,
                             key=lambda c: c.map(order).fillna(len(order)) if c.name == "method" else c)


def machine_words(run_dir: Path) -> str:
    """What a run was timed on, from its run.json: 'torch 2.13.0+cpu, 1 torch thread, CPU flags avx2'."""
    env = environment(run_dir)
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


def table_words(dataset: str, prompt_set: str, temperature: float) -> str:
    return f"{dataset} ({prompt_set}), {temperature_words(temperature)}"


def tables_markdown(frame: pd.DataFrame, what: str, cell: Callable[[Any], str],
                    note: Callable[[pd.DataFrame], str] | None = None) -> str:
    """Per table (set, prompt set and temperature) of `frame`: a bold title naming it and `what`, methods as rows,
    budget points as columns, `cell(row)` in each cell, and `note(cells)` under it."""
    out = []
    for (temperature, dataset, prompt_set), cells_t in frame.groupby(["temperature", "dataset", "prompt_set"],
                                                                      sort=True, dropna=False):
        xs = sorted(cells_t["x"].unique())
        lines = [f"**{table_words(dataset, prompt_set, temperature)}** ({what})", "",
                 "| method | " + " | ".join(point(x) for x in xs) + " |", "|---|" + "---:|" * len(xs)]
        for method, group in cells_t.groupby("method", sort=False):
            cells = {r.x: cell(r) for r in group.itertuples()}
            lines.append(f"| {method_label(method)} | " + " | ".join(cells.get(x, "") for x in xs) + " |")
        lines += ["", note(cells_t)] if note else []
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def markdown(table: pd.DataFrame) -> str:
    """Per table: cells `ratio (low, high)`, `*` where Holm p < 0.05 over that table's cells."""
    return tables_markdown(
        table, "decode token rate / AR's, 95% CI",
        lambda r: f"{r.ratio:.2f} ({r.low:.2f}, {r.high:.2f}){'*' if r.p_holm < ALPHA else ''}",
        lambda cells: f"{int(cells['prompts'].max())} prompts per cell; * differs from 1 with Holm p < 0.05 over the "
                      f"table's {len(cells)} cells.")


def cell_words(row: pd.Series) -> str:
    ratio = f"{row['ratio']:.2f} ({row['low']:.2f}, {row['high']:.2f})"
    return f"{method_label(row['method'])} at {point(row['x'])} on {row['dataset']} ({row['prompt_set']}) {ratio}"


def sentence(table: pd.DataFrame) -> str:
    """Per temperature, over its sets' tables: how many cells are faster than AR, slower, undecided (Holm within each
    table), the faster ones named, else the best cell; and the load the timings were taken at, when recorded."""
    parts = []
    for temperature, cells in table.groupby("temperature", sort=True, dropna=False):
        cells = cells[np.isfinite(cells["ratio"].to_numpy(float))]  # records without a decode phase have no rate
        if cells.empty:
            continue
        verdicts = cells.apply(verdict, axis=1)
        faster = cells[verdicts == "faster"].sort_values("ratio", ascending=False)
        tables = len(cells.groupby(TABLE, dropna=False))
        counts = (f"{len(faster)} of {len(cells)} cells ({tables} table(s)) faster than AR, "
                  f"{int((verdicts == 'slower').sum())} slower, {int((verdicts == 'undecided').sum())} undecided "
                  "(Holm p < 0.05 within each set's table)")
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
    return " ".join(parts) or "No run has a decode token rate (their records have no decode phase)."


def step_costs(runs: pd.DataFrame) -> pd.DataFrame:
    """Why a ratio is what it is, per (dataset, temperature, method, budget point), the run's prompts summed: block
    efficiency (tokens per target call), drafted tokens checked per call, and the time of one step (a target call
    with its drafting and the rest) in AR steps (the AR run's time per token on that set and temperature). A method
    beats AR exactly when its block efficiency exceeds its step's cost in AR steps (ratios of sums, prefill
    included)."""
    keys = [*TABLE, "method", "x"]
    frame = runs.assign(step_s=runs["time_target_s"] + runs["time_draft_s"] + runs["time_other_s"],
                        verified=runs["tokens_verified_per_call"] * runs["target_calls"])
    sums = frame.groupby(keys, dropna=False)[
        ["new_tokens", "target_calls", "time_target_s", "time_draft_s", "step_s", "verified"]].sum()
    ar = sums.xs("ar", level="method").groupby(level=TABLE, dropna=False).sum()
    ar_step = (ar["step_s"] / ar["new_tokens"]).rename("ar_step_s")
    rows = sums.drop(index="ar", level="method").reset_index().merge(ar_step, left_on=TABLE, right_index=True)
    per_call = rows["target_calls"] * rows["ar_step_s"]
    out = pd.DataFrame({
        "dataset": rows["dataset"], "prompt_set": rows["prompt_set"], "temperature": rows["temperature"],
        "method": rows["method"],
        "x": rows["x"].astype(int),
        "block_efficiency": rows["new_tokens"] / rows["target_calls"],
        "tokens_verified_per_call": rows["verified"] / rows["target_calls"],
        "target_cost": rows["time_target_s"] / per_call, "draft_cost": rows["time_draft_s"] / per_call,
        "step_cost": rows["step_s"] / per_call})
    out["ratio"] = out["block_efficiency"] / out["step_cost"]
    return in_order(out)


def costs_markdown(costs: pd.DataFrame) -> str:
    """Per table: cells `BE / step cost (target + draft)`, in AR steps."""
    return tables_markdown(
        costs, "block efficiency / a step's cost in AR steps, of it target call + drafting",
        lambda r: f"{r.block_efficiency:.2f} / {r.step_cost:.2f} ({r.target_cost:.2f} + {r.draft_cost:.2f})")


def costs_sentence(costs: pd.DataFrame) -> str:
    """Per temperature, over its sets: the range of block efficiency against the range of step costs, and in how many
    cells the first exceeds the second (a method faster than AR in the sum over the run's prompts)."""
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


def same_work_spread(costs: pd.DataFrame) -> pd.DataFrame:
    """Groups of runs that did the same work (one table and budget point, equal block efficiency and drafted tokens
    per call: e.g. at T = 0, where every K-candidate tree drafts SD's chain) with the spread of their step costs
    (largest / smallest): how much this machine's speed drifts from run to run, which a per-prompt CI does not see."""
    work = costs.assign(be=costs["block_efficiency"].round(9), checked=costs["tokens_verified_per_call"].round(9))
    rows = []
    for keys, group in work.groupby([*TABLE, "x", "be", "checked"], dropna=False):
        if len(group) > 1:
            rows.append({**dict(zip([*TABLE, "x"], keys)), "methods": len(group),
                         "spread": group["step_cost"].max() / group["step_cost"].min()})
    return pd.DataFrame(rows)


def same_work_sentence(costs: pd.DataFrame) -> str:
    """The largest run-to-run spread among runs that did the same work, or '' when no two runs did."""
    spread = same_work_spread(costs)
    if spread.empty:
        return ""
    top = spread.loc[spread["spread"].idxmax()]
    return (f"Runs that did the same work (at one point of one table, equal block efficiency and drafted tokens per "
            f"call; {len(spread)} such groups of {int(spread['methods'].min())}-{int(spread['methods'].max())} "
            f"methods) differ in step cost by a median factor of {spread['spread'].median():.2f} and at most "
            f"{top['spread']:.2f} ({top['dataset']}, {temperature_words(top['temperature'])}, {point(top['x'])}): "
            "the machine's drift from run to run, which the per-prompt CIs above do not include.")


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
    print(markdown(table) + "\n" + sentence(table) + "\n\n" + costs_markdown(costs) + "\n" + costs_sentence(costs)
          + " " + same_work_sentence(costs))


if __name__ == "__main__":
    main()
