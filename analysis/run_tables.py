"""Tables of the runs themselves rather than of the methods' cells: greedy output against AR's (table_greedy.md),
shape selection on tuning prompts (table_selection.md), process time and the code behind the runs (table_compute.md).
"""

from __future__ import annotations

import pandas as pd

from analysis.columns import SETTING
from analysis.names import KINDS, method_label, setting_title
from analysis.tables import fmt, settings


def greedy_table(runs: pd.DataFrame, prompts: pd.DataFrame) -> str:
    """Greedy runs against AR's greedy output on the same prompts: how many prompts diverge and where first.

    Empty string when no greedy run was checked. In float32 every count should be 0 (greedy identity); in half
    precision a verify pass over k tokens rounds differently from k one-token passes, so outputs may diverge.
    """
    checked = runs[runs["greedy_prompts"] > 0]
    if checked.empty:
        return ""
    parts = []
    for setting, group in settings(checked):
        lines = [f"### Greedy output vs AR: {setting_title(setting)}", "",
                 "Per run: prompts whose generated tokens differ from AR's (same setting and seed), the earliest "
                 "position (0-based token index) of a difference over its prompts, and the median first-difference "
                 "position over the prompts that differ. Per-prompt positions: `greedy_divergence` in prompts.csv.",
                 "", "| method | shape | budget | seed | prompts differing | earliest | median |",
                 "|---|---|---|---:|---:|---:|---:|"]
        for _, run in group.sort_values(["budget", "x", "method", "shape_tag", "seed"], na_position="first").iterrows():
            div = prompts.loc[prompts["run_dir"] == run["run_dir"], "greedy_divergence"].dropna()
            earliest = "–" if div.empty else f"{int(div.min())}"
            median = "–" if div.empty else f"{div.median():g}"
            lines.append(f"| {method_label(run['method'])} | {run['shape_tag']} | {run['budget_value']} | "
                         f"{run['seed']} | {run['greedy_diverged']} / {run['greedy_prompts']} | {earliest} | "
                         f"{median} |")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def selection_changes(tune: pd.DataFrame) -> tuple[int, int]:
    """(cells whose first-ranked shape differs between the run-level ratio of sums and the prompt mean of expected
    block efficiency, cells with two or more tuning runs), over every (setting, budget point, method) of `tune`."""
    changed = cells = 0
    for _, cell_runs in tune.groupby([*SETTING, "budget", "x", "method"], dropna=False, sort=False):
        if len(cell_runs) < 2:
            continue
        cells += 1
        tops = [cell_runs.sort_values([column, "shape_tag"], ascending=[False, True], kind="stable")["shape_tag"]
                .iloc[0] for column in ("expected_block_efficiency", "expected_block_efficiency_prompt_mean")]
        changed += tops[0] != tops[1]
    return changed, cells


def selection_table(runs: pd.DataFrame) -> str:
    """The tuning runs: per point and method, every shape's score on the tuning prompts (run-level and prompt mean)
    and which ones went on to the evaluation prompts, and how many cells the other ranking would change. Empty
    string when no run was a tuning run."""
    tune = runs[runs["selection_role"] == "tune"]
    if tune.empty:
        return ""
    eval_runs = runs[runs["selection_role"] == "eval"]
    changed, cells = selection_changes(tune)
    parts = [f"Ranked by the other definition of expected block efficiency (prompt mean instead of run-level ratio "
             f"of sums, or the reverse), {changed} of {cells} cells with two or more tuning runs would select another "
             "shape.\n"]
    for setting, group in settings(tune):
        lines = [f"### Shape selection on tuning prompts: {setting_title(setting)}", "",
                 "Each tuning run's expected block efficiency on the tuning prompts, as the run-level ratio of sums "
                 "(total expected tokens / total target calls) and as the mean over prompts of per-prompt values, "
                 "its measured block efficiency (run-level), and whether that shape was then run on the evaluation "
                 "prompts.", "",
                 "| budget | method | shape | tuning prompts | selected by | expected BE, run-level | "
                 "expected BE, prompt mean | measured BE, run-level | evaluated |",
                 "|---|---|---|---:|---|---:|---:|---:|---|"]
        for _, run in group.sort_values(["budget", "x", "method", "expected_block_efficiency", "block_efficiency"],
                                        ascending=[True, True, True, False, False]).iterrows():
            same = eval_runs[(eval_runs["method"] == run["method"]) & (eval_runs["budget"] == run["budget"])
                             & (eval_runs["x"] == run["x"]) & (eval_runs["shape_tag"] == run["shape_tag"])]
            for key, value in setting.items():
                if key != "prompt_set":  # the evaluation prompts are disjoint from the tuning prompts
                    same = same[same[key] == value]
            lines.append(f"| {run['budget_value']} | {method_label(run['method'])} | {run['shape_tag']} | "
                         f"{run['selection_prompts'] or run['prompts']} | {run['selected_by'] or '–'} | "
                         f"{fmt(run['expected_block_efficiency'])} | "
                         f"{fmt(run['expected_block_efficiency_prompt_mean'])} | {fmt(run['block_efficiency'])} | "
                         f"{'yes' if len(same) else 'no'} |")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def hours(seconds: pd.Series) -> str:
    """The sum of `seconds` in hours ('1.25'), '–' when none is recorded."""
    return f"{seconds.sum() / 3600:.2f}" if seconds.notna().any() else "–"


def compute_table(runs: pd.DataFrame) -> str:
    """table_compute.md: the process time behind the runs, per setting and budget kind, and in total.

    `elapsed_s` is what a run's process spent on it (warm-up, decoding, expected yields, scoring; recorded in the
    summary); decoding time is the timed part only (`wall_s`), which every run has. Empty for no runs.
    """
    if runs.empty:
        return ""
    lines = ["# Compute", "",
             "Process time per setting and budget kind: decoding (the timed part of every prompt) and elapsed (all "
             "a run's process spent on it, model loading excepted; only runs that record `elapsed_s`). One process "
             "per run, one torch thread each.", "",
             "| setting | budget | runs | of them tuning | decoding (h) | elapsed (h) | runs without elapsed |",
             "|---|---|---:|---:|---:|---:|---:|"]
    keyed = runs.assign(budget_kind=runs["budget"].fillna("none"))
    for setting, group in settings(keyed):
        for kind, sub in group.groupby("budget_kind", sort=True):
            lines.append(f"| {setting_title(setting)} | {KINDS[kind][0] if kind in KINDS else 'AR'} | {len(sub)} | "
                         f"{int((sub['selection_role'] == 'tune').sum())} | {hours(sub['wall_s'])} | "
                         f"{hours(sub['elapsed_s'])} | {int(sub['elapsed_s'].isna().sum())} |")
    lines.append(f"| **all** | | {len(runs)} | {int((runs['selection_role'] == 'tune').sum())} | "
                 f"{hours(runs['wall_s'])} | {hours(runs['elapsed_s'])} | "
                 f"{int(runs['elapsed_s'].isna().sum())} |")
    return "\n".join(lines) + "\n\n" + provenance_text(runs)


def provenance_text(runs: pd.DataFrame) -> str:
    """The code behind the runs (run.json): runs per commit, how many came from a clean or a modified checkout or
    predate the flag, and every run from a modified checkout (its commit and the sha256 of its diff)."""
    tree = runs["git_tree"]
    commits = runs["git_sha"].replace("", "unrecorded").value_counts(sort=False).sort_index()
    lines = ["## Provenance", "",
             f"Runs per commit: {', '.join(f'{sha[:10]} ({n})' for sha, n in commits.items())}. Working tree at "
             f"each run's start (tracked files against that commit): {int((tree == 'clean').sum())} clean, "
             f"{int((tree == 'modified').sum())} modified, {int((tree == '').sum())} not recorded (runs made "
             "before run.json recorded it)."]
    modified = runs[tree == "modified"]
    if len(modified):
        lines += ["", "Runs from a modified checkout:", "", "| setting | budget | method | shape | commit | "
                  "diff sha256 |", "|---|---|---|---|---|---|"]
        for _, run in modified.sort_values(["budget_value", "method", "shape_tag"]).iterrows():
            setting = setting_title({k: run[k] for k in SETTING})
            lines.append(f"| {setting} | {run['budget_value']} | {method_label(run['method'])} | "
                         f"{run['shape_tag']} | {run['git_sha'][:10]} | {run['git_diff_sha256'][:16]} |")
    return "\n".join(lines) + "\n"
