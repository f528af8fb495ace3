"""The pair families of a report: which runs are compared with which, and Holm's correction over each family.

Two runs are comparable when they share the setting (model pair, dtype, dataset, sampling), the seed and the budget
point; they are paired prompt by prompt (prompt ids present in both; analysis.stats.compare). At a point where a
method ran several shapes, the shape that represents it is the one the tables show (analysis.tables.best_shapes:
selected on tuning prompts, or best of N on the same prompts — each pair says which). One table is one family: for
each metric, Holm's step-down correction runs over all the comparisons of one (setting, seed, budget kind), every
budget point and pair of methods together.

Pooled over datasets: where the same methods ran at the same point (pair, sampling, seed, budget point) on several
datasets, their per-prompt differences are also tested together (3 x 32 prompts: SEs about 1/sqrt(3) of one
dataset's), as the setting 'a+b+c' (its own Holm family). Pairing stays within a prompt, so each dataset's own
level cancels; a pooled difference is the average over the pooled prompts, each dataset weighted by its prompt count.

Besides the best-shape comparisons, each tree-level verifier is compared with the node-rule method whose drafts it
verifies (bv with sd, tv with rsd_c) on every shape both ran: the same drafts, verified two ways (issue 11).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import combinations

import numpy as np
import pandas as pd

from analysis.columns import SETTING
from analysis.names import method_label
from analysis.stats import PAIR_METRICS, compare, holm

SAME_DRAFTS = (("bv", "sd"), ("tv", "rsd_c"))  # (tree-level verifier, the node-rule method drafting the same trees)
FAMILY = (*SETTING, "seed", "budget")


def rank_column(frame: pd.DataFrame) -> str:
    """Rank by expected block efficiency when every row has it (less noisy), else by measured."""
    expected = frame["expected_block_efficiency"].to_numpy(float)
    return "expected_block_efficiency" if len(frame) and np.isfinite(expected).all() else "block_efficiency"


def choice_text(row: pd.Series) -> str:
    """How a method's shape at a point was chosen, in a few words (for the pair tables)."""
    tag = f"{method_label(row['method'])} {row['shape_tag']}"
    if row["selection_kind"] == "tuned":
        return f"{tag} (tuned on {int(row['selection_prompts'])} prompts)"
    return f"{tag} (best of {row['n_shapes']} on these prompts)" if row["selection_kind"] == "best_of" else tag


def best_pairs(best: pd.DataFrame, runs: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """Paired comparisons of the best shapes (as in the tables) of every two drafting methods, per seed and point.

    Each pair is ordered so that the method ranked higher (rank_column, seed means of the chosen shapes) comes
    first: differences are then mostly positive. AR is not compared (it drafts nothing; tables give ratios to it).
    """
    rows = []
    drafted = best[best["budget"].notna()]
    evaluated = runs[runs["selection_role"] != "tune"]  # a tuning run shares its shape tag with the chosen run
    for keys, point in drafted.groupby([*SETTING, "budget", "x"], sort=True):
        by = rank_column(point)
        point = point.sort_values(by, ascending=False, kind="stable")
        chosen = evaluated.merge(point[[*SETTING, "budget", "x", "method", "shape_tag"]],
                            on=[*SETTING, "budget", "x", "method", "shape_tag"])
        for seed, seed_runs in chosen.groupby("seed"):
            run_of = dict(zip(seed_runs["method"], seed_runs["run_dir"]))
            order = [m for m in point["method"] if m in run_of]
            for hi, lo in combinations(order, 2):
                info = {r["method"]: r for _, r in point[point["method"].isin([hi, lo])].iterrows()}
                rows.append({**dict(zip([*SETTING, "budget", "x"], keys)), "seed": seed, "kind": "best shape",
                             "first": hi, "second": lo, "ranked_by": by,
                             "chosen": f"{choice_text(info[hi])} vs {choice_text(info[lo])}",
                             **compare(prompts, run_of[hi], run_of[lo])})
    return pd.DataFrame(rows)


def same_draft_pairs(runs: pd.DataFrame, prompts: pd.DataFrame,
                     pairs: Sequence[tuple[str, str]] = SAME_DRAFTS) -> pd.DataFrame:
    """Each tree-level verifier against the method drafting the same trees, on every shape (and seed) both ran."""
    rows = []
    evaluated = runs[runs["selection_role"] != "tune"]
    keys = [*SETTING, "seed", "budget", "x", "shape"]
    for new, old in pairs:
        a = evaluated[evaluated["method"] == new]
        b = evaluated[evaluated["method"] == old]
        for _, row in a.merge(b, on=keys, suffixes=("", "_old")).iterrows():
            rows.append({**{k: row[k] for k in [*SETTING, "budget", "x", "seed"]}, "kind": "same drafts",
                         "first": new, "second": old, "ranked_by": "", "chosen": f"shape {row['shape_tag']}",
                         **compare(prompts, row["run_dir"], row["run_dir_old"])})
    return pd.DataFrame(rows)


def pooled_label(datasets: Iterable[str]) -> str:
    """The setting name of comparisons pooled over `datasets`: 'dolly_builtin+wmt_builtin+xsum_builtin'."""
    return "+".join(sorted(datasets))


def pooled_best(best: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """Rows like best_shapes' for points pooled over datasets (module docstring): per (setting but the dataset,
    budget point), the methods that ran on every dataset seen at that point, with `run_dirs` joined and the rank
    metrics averaged over all their prompts. Empty where no point has two datasets."""
    by_run = prompts.set_index("run_dir")
    rows = []
    drafted = best[best["budget"].notna()]
    pooled_keys = [k for k in SETTING if k not in ("dataset", "prompt_set")]
    for keys, point in drafted.groupby([*pooled_keys, "budget", "x"], sort=True, dropna=False):
        datasets = sorted(set(point["dataset"]))
        if len(datasets) < 2:
            continue
        for method, cells in point.groupby("method", sort=False):
            if sorted(cells["dataset"]) != datasets:  # one cell per dataset (two prompt sets of one are not pooled)
                continue
            dirs = [d for ds in cells["run_dirs"] for d in ds]
            values = by_run.loc[dirs]
            rows.append({**dict(zip([*pooled_keys, "budget", "x"], keys)), "dataset": pooled_label(datasets),
                         "prompt_set": " + ".join(cells.sort_values("dataset")["prompt_set"]),
                         "method": method, "run_dirs": dirs,
                         **{m: float(values[m].mean()) for m in ("expected_block_efficiency", "block_efficiency")}})
    return pd.DataFrame(rows)


def pooled_pairs(pooled: pd.DataFrame, runs: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """Best-shape comparisons pooled over datasets (rows of pooled_best), per seed, ranked as best_pairs ranks."""
    rows = []
    seed_of = dict(zip(runs["run_dir"], runs["seed"]))
    for keys, point in pooled.groupby([*SETTING, "budget", "x"], sort=True, dropna=False):
        by = rank_column(point)
        point = point.sort_values(by, ascending=False, kind="stable")
        seeds = sorted({seed_of[d] for dirs in point["run_dirs"] for d in dirs})
        for seed in seeds:
            dirs_of = {r["method"]: [d for d in r["run_dirs"] if seed_of[d] == seed] for _, r in point.iterrows()}
            order = [m for m in point["method"] if dirs_of[m]]
            for hi, lo in combinations(order, 2):
                rows.append({**dict(zip([*SETTING, "budget", "x"], keys)), "seed": seed, "kind": "best shape",
                             "first": hi, "second": lo, "ranked_by": by,
                             "chosen": f"{method_label(hi)} vs {method_label(lo)}, each dataset's shape as in its "
                                       "table",
                             **compare(prompts, dirs_of[hi], dirs_of[lo])})
    return pd.DataFrame(rows)


def adjust(pairs: pd.DataFrame) -> pd.DataFrame:
    """Add `<metric>_p_holm` per metric: Holm over each family (setting, seed, budget kind and kind of comparison)."""
    if pairs.empty:
        return pairs
    pairs = pairs.copy()
    for metric in PAIR_METRICS:
        pairs[f"{metric}_p_holm"] = np.nan
    for _, family in pairs.groupby([*FAMILY, "kind"], dropna=False, sort=False):
        for metric in PAIR_METRICS:
            pairs.loc[family.index, f"{metric}_p_holm"] = holm(family[f"{metric}_p"])
    return pairs


def all_pairs(best: pd.DataFrame, runs: pd.DataFrame, prompts: pd.DataFrame,
              pooled: pd.DataFrame | None = None) -> pd.DataFrame:
    """Best-shape, same-draft and (given pooled_best's rows) pooled comparisons with Holm-adjusted p-values (see the
    module docstring)."""
    pooled_rows = pooled_pairs(pooled, runs, prompts) if pooled is not None and len(pooled) else pd.DataFrame()
    frames = [f for f in (best_pairs(best, runs, prompts), same_draft_pairs(runs, prompts), pooled_rows)
              if not f.empty]
    return adjust(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()
