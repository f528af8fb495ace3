"""Markdown tables: per (model pair, dataset, sampling setting) and budget kind, methods x budget points.

Protocol: runs are first averaged over seeds per tree shape; where several shapes of one method meet a budget point,
the shape with the highest block efficiency represents the method there (and is labelled so); the MBSU and
token-rate tables show that same shape. AR drafts nothing, so its single value fills every budget point.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from analysis.load import SETTING

BUILTIN = ("ar", "sd", "specinfer", "spectr", "rsd_c", "rsd_s")
LABELS = {"ar": "AR", "sd": "SD", "specinfer": "SpecInfer", "spectr": "SpecTr", "rsd_c": "RSD-C", "rsd_s": "RSD-S"}
KINDS = {"fixed_length": ("fixed draft length", "L"), "fixed_compute": ("fixed target compute", "B")}
METRICS = {
    "block_efficiency": "Block efficiency (generated tokens per target call)",
    "mbsu": "MBSU (memory-bound speed-up over AR)",
    "token_rate_ratio": "Token rate (ratio to AR, same setting and seed)",
}
VALUES = ("block_efficiency", "mbsu", "token_rate", "token_rate_ratio", "accuracy", "accuracy_ratio")
POINT = (*SETTING, "budget", "x", "method")  # one table cell (per metric)


def method_order(methods: Iterable[str]) -> list[str]:
    """The built-in methods in paper order, then any others by name."""
    methods = set(methods)
    return [m for m in BUILTIN if m in methods] + sorted(methods - set(BUILTIN))


def method_label(method: str) -> str:
    """The display name of a method ('rsd_c' -> 'RSD-C'; unknown names unchanged)."""
    return LABELS.get(method, method)


def setting_title(setting: Mapping[str, Any]) -> str:
    """A readable one-line name of a (model pair, dataset, sampling) setting."""
    return (f"{setting['model_pair']} / {setting['dataset']} / T={setting['temperature']:g}, "
            f"top-k={setting['top_k']}, top-p={setting['top_p']:g}, {setting['max_new_tokens']} new tokens")


def settings(frame: pd.DataFrame) -> list[tuple[dict, pd.DataFrame]]:
    """The frame split by setting (SETTING keys), each with its keys as a dict, in sorted order."""
    return [(dict(zip(SETTING, keys)), group) for keys, group in frame.groupby(list(SETTING), sort=True)]


def best_shapes(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (setting, budget kind, point, method): the shape with the best seed-mean block efficiency.

    Adds `n_shapes` (shapes that met the point), `seeds` and `run_dirs` (the runs behind the chosen shape).
    """
    accepts = [c for c in runs.columns if c.startswith("accept_d")]
    per_shape = (runs.groupby([*POINT, "shape_tag"], dropna=False, sort=False)
                 .agg(**{v: (v, "mean") for v in (*VALUES, *accepts)}, seeds=("seed", "nunique"),
                      run_dirs=("run_dir", list))
                 .reset_index())
    per_shape["n_shapes"] = per_shape.groupby(list(POINT), dropna=False)["shape_tag"].transform("size")
    best = per_shape.sort_values("block_efficiency", ascending=False, na_position="last", kind="stable")
    return best.drop_duplicates(list(POINT)).sort_values(list(POINT), na_position="first").reset_index(drop=True)


def fmt(value: float) -> str:
    """A table number: two decimals, an en dash for NaN."""
    return "–" if math.isnan(value) else f"{value:.2f}"


def cell(row: pd.Series, metric: str) -> str:
    """A cell's text: the value, plus '(shape, best of n shapes)' where several shapes met the point."""
    text = fmt(row[metric])
    return text if row["n_shapes"] == 1 else f"{text} ({row['shape_tag']}, best of {row['n_shapes']} shapes)"


def caption(metric: str, kind: str, seeds: int) -> str:
    """The protocol statement under a table's heading."""
    kind_name, symbol = KINDS[kind]
    same = "" if metric == "block_efficiency" else " (this table shows that same shape)"
    return (f"Rows: methods; columns: {kind_name} {symbol}. Each cell is the mean over {seeds} seed(s). Where several "
            "tree shapes of one method meet a budget point, the cell shows the shape with the highest block "
            f"efficiency, marked `(shape, best of n shapes)`{same}. AR drafts nothing: its one value fills every "
            "budget point.")


def markdown_table(best: pd.DataFrame, metric: str, kind: str) -> str:
    """One setting's table for one budget kind: methods as rows, budget points as columns (pipe markdown)."""
    symbol = KINDS[kind][1]
    drafted = best[best["budget"] == kind]
    points = sorted(drafted["x"].unique())
    lines = ["| method | " + " | ".join(f"{symbol}={x}" for x in points) + " |",
             "|---|" + "---:|" * len(points)]
    for method in method_order(best["method"]):
        rows = best[best["method"] == method]
        if rows["budget"].isna().all():
            cells = [cell(rows.iloc[0], metric)] * len(points)
        else:
            at = rows[rows["budget"] == kind].set_index("x")
            if at.empty:
                continue
            cells = [cell(at.loc[x], metric) if x in at.index else "–" for x in points]
        lines.append(f"| {method_label(method)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_tables(best: pd.DataFrame, metric: str) -> str:
    """Every (setting, budget kind) table of `metric`, each with a heading and the protocol caption."""
    parts = []
    for setting, group in settings(best):
        seeds = int(group["seeds"].max())
        for kind in (k for k in KINDS if (group["budget"] == k).any()):
            heading = f"### {METRICS[metric]}: {setting_title(setting)}; {KINDS[kind][0]}"
            parts.append(f"{heading}\n\n{caption(metric, kind, seeds)}\n\n{markdown_table(group, metric, kind)}\n")
    return "\n".join(parts)


def all_tables(runs: pd.DataFrame) -> dict[str, str]:
    """Markdown text per metric of METRICS (block efficiency, MBSU, token-rate ratio)."""
    best = best_shapes(runs)
    return {metric: markdown_tables(best, metric) for metric in METRICS}
