"""Markdown tables: per (model pair, dataset, sampling setting) and budget kind, methods x budget points.

Protocol: runs on tuning prompts (summary `selection.role == "tune"`) only choose shapes and never appear in these
tables. The remaining runs are averaged over seeds per tree shape. Where one method has one shape at a budget
point, that shape is the cell. Where the runner selected shapes on tuning prompts (`selection.role == "eval"`), the
cell is the shape ranked first there (`selection.rank`, else the best of the evaluated ones), labelled "tuned".
Otherwise, where several shapes meet the point, the cell is the best of them on the very prompts the table reports
(by expected block efficiency when every shape has it, else measured), labelled "best of N on these prompts":
that choice is biased upward (winner's curse). The MBSU and token-rate tables show the same shape. AR drafts
nothing, so its single value fills every budget point.

A cell of block efficiency, expected block efficiency or MBSU (CELL_MEANS) is the mean over its prompts of the
per-prompt values (a prompt's tokens / its target calls), ± their SE: the estimator the paired comparisons and the
shape choices of these tables use. A token-rate cell is the run's rate (total tokens / total seconds) over AR's, ±
the SE of the per-prompt ratios; the optimum's cells are defined in table_optimum.md.

The acceptance dial's runs (model_pair.mix set) show '–' in the MBSU and token-rate tables, with a footnote: their
draft forward also runs the target. table_optimum.md shows each method's root acceptance, the root optimum alpha*
and their ratio (docs/algorithms.md#optimum), mean ± 95% CI half-width over prompts; '–' for runs without them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.columns import DIAL_NOTE, OPTIMUM, SETTING, SPEED
from analysis.names import KINDS, method_label, method_order, setting_title
from rsd.harness.selection import SELECTED_BY

METRICS = {
    "block_efficiency": "Block efficiency (generated tokens per target call)",
    "expected_block_efficiency": "Expected block efficiency (sum over steps of the exact expected tokens emitted, "
                                 "per target call)",
    "mbsu": "MBSU (memory-bound speed-up over AR)",
    "token_rate_ratio": "Token rate (ratio to AR, same setting and seed)",
}
DECODE_TITLE = ("Decode token rate (tokens after the first / decode seconds, prefill excluded; ratio to AR, same "
                "setting and seed)")
VALUES = ("block_efficiency", "expected_block_efficiency", "mbsu", "token_rate", "token_rate_ratio",
          "decode_token_rate", "decode_token_rate_ratio", "accuracy", "accuracy_ratio", *OPTIMUM)
ERRORS = ("block_efficiency", "expected_block_efficiency", "mbsu", "token_rate_ratio", "decode_token_rate_ratio",
          "accuracy_ratio", *OPTIMUM)  # metrics that get `<m>_se` and `<m>_ci` (95% t half-width) over prompts
OPTIMUM_TITLES = {
    "root_acceptance": "Root acceptance (the verifier's exact probability of accepting one of the root's candidates)",
    "root_optimum": "Root optimum alpha* (the most any lossless verifier could accept at the root, same drafts)",
    "fraction_of_optimum": "Fraction of the optimum (root acceptance / alpha*)",
}
POINT = (*SETTING, "budget", "x", "method")  # one table cell (per metric)
# A cell of these is the mean over its prompts of the per-prompt values (each prompt's tokens / target calls), the
# same numbers its ± and every paired comparison use; the run-level ratio of sums appears only where labelled so.
CELL_MEANS = ("block_efficiency", "expected_block_efficiency", "mbsu")


def settings(frame: pd.DataFrame) -> list[tuple[dict, pd.DataFrame]]:
    """The frame split by setting (SETTING keys), each with its keys as a dict, in sorted order."""
    return [(dict(zip(SETTING, keys)), group) for keys, group in frame.groupby(list(SETTING), sort=True)]


def choose(group: pd.DataFrame) -> tuple[pd.Series, str, str]:
    """The shape that represents a method at one point, how it was chosen ('', 'tuned', 'best_of') and the words."""
    crit = ("expected_block_efficiency" if np.isfinite(group["expected_block_efficiency"].to_numpy(float)).all()
            else "block_efficiency")
    crit_words = "expected block efficiency" if crit.startswith("expected") else "measured block efficiency"
    tuned = group[group["selection_role"] == "eval"]
    if len(tuned):
        pick = tuned.sort_values(["selection_rank", crit], ascending=[True, False], na_position="last",
                                 kind="stable").iloc[0]
        by = str(pick["selected_by"] or "the runner's criterion").split(" on ")[0]  # older runs named the prompts
        if by == "expected block efficiency":  # runs before budget.select.by ranked the run-level value
            by = SELECTED_BY["ratio_of_sums"]
        words = f"selected on {int(pick['selection_prompts'])} tuning prompts by {by}"
        if len(tuned) > 1 and not np.isfinite(pick["selection_rank"]):
            words += f", then best of {len(tuned)} on these prompts by {crit_words} (biased upward)"
        return pick, "tuned", words
    pick = group.sort_values(crit, ascending=False, na_position="last", kind="stable").iloc[0]
    if len(group) == 1:
        return pick, "", ""
    return pick, "best_of", f"best of {len(group)} shapes on these prompts by {crit_words} (biased upward)"


def prompt_means(run_dirs: pd.Series, prompts: pd.DataFrame, metrics: tuple[str, ...] = CELL_MEANS
                 ) -> pd.DataFrame:
    """Per entry of `run_dirs` (a list of run directories each): the mean over those runs' prompts of each metric's
    per-prompt value (finite values only; NaN when there is none), the cell definition of CELL_MEANS."""
    by_run = prompts.set_index("run_dir")[list(metrics)]
    return pd.DataFrame([by_run.loc[dirs].mean() for dirs in run_dirs], index=run_dirs.index, columns=list(metrics))


def best_shapes(runs: pd.DataFrame, prompts: pd.DataFrame, errors: bool = True) -> pd.DataFrame:
    """One row per (setting, budget kind, point, method): the shape that represents the method (module docstring).

    CELL_MEANS metrics are means over the prompts of the shape's runs (seeds pooled); the others are means over
    seeds of the run-level values. Adds `n_shapes` (evaluated shapes that met the point), `seeds`, `run_dirs` (the
    runs behind the chosen shape), `selection_kind` ('', 'tuned', 'best_of') and `selection` (how it was chosen, in
    words); with `errors`, also `<metric>_se` and `<metric>_ci` (see with_errors).
    """
    evaluated = runs[runs["selection_role"] != "tune"]
    accepts = [c for c in runs.columns if c.startswith("accept_d")]
    per_shape = (evaluated.groupby([*POINT, "shape_tag"], dropna=False, sort=False)
                 .agg(**{v: (v, "mean") for v in (*VALUES, *accepts)}, seeds=("seed", "nunique"),
                      run_dirs=("run_dir", list), task=("task", "first"), selection_role=("selection_role", "first"),
                      selection_rank=("selection_rank", "min"), selection_prompts=("selection_prompts", "max"),
                      selected_by=("selected_by", "first"), speed_omitted=("speed_omitted", "any"))
                 .reset_index())
    per_shape[list(CELL_MEANS)] = prompt_means(per_shape["run_dirs"], prompts)
    rows = []
    for _, group in per_shape.groupby(list(POINT), dropna=False, sort=False):
        pick, kind, words = choose(group)
        rows.append({**pick.to_dict(), "n_shapes": len(group), "selection_kind": kind, "selection": words})
    best = (pd.DataFrame(rows).astype({"x": "Int64"}).sort_values(list(POINT), na_position="first")
            .reset_index(drop=True))
    return with_errors(best, prompts) if errors else best


def standard_error(values: pd.Series) -> tuple[float, int]:
    """Standard error of the mean of the finite values (0 for fewer than two) and their count."""
    finite = values[np.isfinite(values.to_numpy(float))]
    return (float(finite.std(ddof=1) / math.sqrt(len(finite))) if len(finite) > 1 else 0.0), len(finite)


def with_errors(best: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """`best` plus `<metric>_se` (SE over the prompts of the runs behind each row, seeds pooled) and `<metric>_ci`
    (half-width of the 95% t interval, t quantile with n - 1 degrees of freedom), per ERRORS metric."""
    by_run = prompts.set_index("run_dir")
    out = best.copy()
    for metric in ERRORS:
        errors = [standard_error(by_run.loc[dirs, metric]) for dirs in best["run_dirs"]]
        out[f"{metric}_se"] = [se for se, _ in errors]
        out[f"{metric}_ci"] = [se * sps.t.ppf(0.975, n - 1) if n > 1 else 0.0 for se, n in errors]
    return out


def fmt(value: float) -> str:
    """A table number: two decimals, an en dash for NaN."""
    return "–" if math.isnan(value) else f"{value:.2f}"


def cell(row: pd.Series, metric: str, spread: str = "se") -> str:
    """A cell's text: 'mean ± SE' (spread 'ci': ± the 95% CI half-width), plus '(shape, best of n†)' or
    '(shape, tuned‡)' where a shape was chosen."""
    se = row.get(f"{metric}_{spread}", math.nan)
    text = fmt(row[metric]) + (f" ± {se:.2f}" if np.isfinite(row[metric]) and np.isfinite(se) else "")
    if row["selection_kind"] == "best_of":
        return f"{text} ({row['shape_tag']}, best of {row['n_shapes']}†)"
    if row["selection_kind"] == "tuned":
        return f"{text} ({row['shape_tag']}, tuned‡)"
    return text


def caption(group: pd.DataFrame, metric: str, kind: str, spread: str = "se") -> str:
    """The protocol statement under a table's heading: what a cell is (`spread` as in `cell`) and how each chosen
    shape was chosen."""
    kind_name, symbol = KINDS[kind]
    seeds = int(group["seeds"].max())
    spread_words = "SE" if spread == "se" else "the half-width of the 95% t interval"
    if metric in CELL_MEANS:
        what = (f"the mean over prompts of the per-prompt value ± its {spread_words} (seeds pooled; {seeds} "
                "seed(s))")
        if metric != "mbsu":
            what += ("; a prompt's value is its tokens / its target calls, not the run's total tokens / total "
                     "target calls")
    else:
        what = (f"the run-level value (seeds averaged; {seeds} seed(s)) ± the {spread_words} of the per-prompt "
                "values")
    text = f"Rows: methods; columns: {kind_name} {symbol}. Each cell is {what}."
    if group["budget"].isna().any():
        text += " AR drafts nothing: its one value fills every budget point."
    drafted = group[group["budget"] == kind]
    if (drafted["selection_kind"] == "best_of").any():
        text += (" † several tree shapes met the point; the cell is the best of them chosen on the same prompts this "
                 "table reports, which is biased upward (winner's curse).")
    tuned = drafted[drafted["selection_kind"] == "tuned"]
    if len(tuned):
        text += f" ‡ {tuned['selection'].iloc[0]}, disjoint from the prompts this table reports."
    if (drafted["selection_kind"] != "").any() and metric != "block_efficiency":
        text += " The shape is the one of the block-efficiency table."
    if metric in SPEED and group["speed_omitted"].any():
        text += f" {DIAL_NOTE}"
    return text


def token_rate_column(group: pd.DataFrame) -> str:
    """The decode-rate ratio when every run of the table has it (prefill excluded), else the wall-clock ratio."""
    decode = group["decode_token_rate_ratio"].to_numpy(float)
    return "decode_token_rate_ratio" if np.isfinite(decode).all() else "token_rate_ratio"


def markdown_table(best: pd.DataFrame, metric: str, kind: str, spread: str = "se") -> str:
    """One setting's table for one budget kind: methods as rows, budget points as columns (pipe markdown); `spread`
    as in `cell`."""
    symbol = KINDS[kind][1]
    drafted = best[best["budget"] == kind]
    points = sorted(drafted["x"].unique())
    lines = ["| method | " + " | ".join(f"{symbol}={x}" for x in points) + " |",
             "|---|" + "---:|" * len(points)]
    for method in method_order(best["method"]):
        rows = best[best["method"] == method]
        if rows["budget"].isna().all():
            cells = [cell(rows.iloc[0], metric, spread)] * len(points)
        else:
            at = rows[rows["budget"] == kind].set_index("x")
            if at.empty:
                continue
            cells = [cell(at.loc[x], metric, spread) if x in at.index else "–" for x in points]
        lines.append(f"| {method_label(method)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_tables(best: pd.DataFrame, metric: str) -> str:
    """Every (setting, budget kind) table of `metric`, each with a heading and the protocol caption.

    The token-rate table shows the decode rate where every run of that table records it (and its heading says so).
    """
    parts = []
    for setting, group in settings(best):
        for kind in (k for k in KINDS if (group["budget"] == k).any()):
            shown, title = metric, METRICS[metric]
            if metric == "token_rate_ratio" and token_rate_column(group) == "decode_token_rate_ratio":
                shown, title = "decode_token_rate_ratio", DECODE_TITLE
            heading = f"### {title}: {setting_title(setting)}; {KINDS[kind][0]}"
            parts.append(f"{heading}\n\n{caption(group, shown, kind)}\n\n{markdown_table(group, shown, kind)}\n")
    return "\n".join(parts)


GROUPING = ("Runs are grouped by model pair, draft model, dtype, dataset, prompt set, sampling, max new tokens and "
            "the acceptance dial's mix (the heading of each table); runs of different groups are never averaged or "
            "compared, so two prompt sets of one dataset get two tables.")


def all_tables(runs: pd.DataFrame, prompts: pd.DataFrame) -> dict[str, str]:
    """Markdown text per metric of METRICS (each opening with GROUPING); the expected block efficiency only where some
    run records it."""
    best = best_shapes(runs, prompts)
    metrics = [m for m in METRICS if m != "expected_block_efficiency"
               or np.isfinite(runs["expected_block_efficiency"].to_numpy(float)).any()]
    return {metric: f"{GROUPING}\n\n{markdown_tables(best, metric)}" for metric in metrics}


def optimum_table(best: pd.DataFrame) -> str:
    """table_optimum.md: per setting and budget kind, each drafting method's root acceptance, root optimum alpha* and
    fraction of the optimum per budget point (the shape of the block-efficiency table), mean ± 95% CI half-width
    over prompts; '–' where the runs did not record them. Empty without drafting runs."""
    drafted = best[best["budget"].notna()]
    if drafted.empty:
        return ""
    parts = ["# Root acceptance against the optimum", "", GROUPING, "",
             "alpha* (the root optimum) is the largest probability that any lossless verifier accepts one of the "
             "root's drafted candidates, given how they were drawn from the draft law (docs/algorithms.md#optimum). "
             "Per method and point: the mean over steps of the verifier's exact root acceptance, of alpha*, and the "
             "fraction of the optimum (sum of acceptances / sum of alpha*; 1 = no lossless verifier could accept "
             "more at the root); the interval is over per-prompt values. '–': the runs did not record it (runs "
             "made before it was recorded, or no step with root candidates).", ""]
    for setting, group in settings(drafted):
        for kind in (k for k in KINDS if (group["budget"] == k).any()):
            for metric, title in OPTIMUM_TITLES.items():
                parts += [f"### {title}: {setting_title(setting)}; {KINDS[kind][0]}", "",
                          caption(group, metric, kind, spread="ci"), "",
                          markdown_table(group, metric, kind, spread="ci"), ""]
    return "\n".join(parts)
