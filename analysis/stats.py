"""Paired comparisons of methods on the same prompts: per-prompt differences, t intervals, Holm correction, rankings.

Two runs are comparable when they share the setting (model pair, dtype, dataset, sampling), the seed and the budget
point; they are paired prompt by prompt (prompt ids present in both). At a point where a method ran several shapes,
the shape that represents it is the one the tables show (analysis.tables.best_shapes: selected on tuning prompts, or
best of N on the same prompts — each pair says which). For each metric, the difference (first minus second method)
is averaged over prompts, with a two-sided 95% t interval and the p-value of the paired t-test (a t-test of the
differences against 0). One table is one family: for each metric, Holm's step-down correction runs over all the
comparisons of one (setting, seed, budget kind), every budget point and pair of methods together.

Pooled over datasets: where the same methods ran at the same point (pair, sampling, seed, budget point) on several
datasets, their per-prompt differences are also tested together (3 x 32 prompts: SEs about 1/sqrt(3) of one
dataset's), as the setting 'a+b+c' (its own Holm family). Pairing stays within a prompt, so each dataset's own
level cancels; a pooled difference is the average over the pooled prompts, each dataset weighted by its prompt count.

Besides the best-shape comparisons, each tree-level verifier is compared with the node-rule method whose drafts it
verifies (bv with sd, tv with rsd_c) on every shape both ran: the same drafts, verified two ways (issue 11).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.load import DIAL_NOTE, SETTING
from analysis.names import KINDS, method_label, setting_title

ALPHA = 0.05
PAIR_METRICS = {  # column -> display name
    "expected_block_efficiency": "expected BE",
    "block_efficiency": "measured BE",
    "mbsu": "MBSU",
    "token_rate": "token rate (tok/s)",
}
SAME_DRAFTS = (("bv", "sd"), ("tv", "rsd_c"))  # (tree-level verifier, the node-rule method drafting the same trees)
FAMILY = (*SETTING, "seed", "budget")


@dataclass(frozen=True)
class Paired:
    """A paired comparison: n prompts, mean difference, its 95% CI, the paired t-test's two-sided p-value."""

    n: int
    mean: float
    low: float
    high: float
    p: float


def paired(first: Sequence[float], second: Sequence[float], confidence: float = 0.95) -> Paired:
    """Paired comparison of two aligned samples (differences first - second); pairs with a NaN are dropped.

    Fewer than two pairs give NaN interval and p. Identical differences (zero spread) give a zero-width interval
    and p = 1 when they are all 0, p = 0 otherwise (the t statistic is 0 or infinite).
    """
    diff = np.asarray(first, dtype=float) - np.asarray(second, dtype=float)
    diff = diff[np.isfinite(diff)]
    n = len(diff)
    if n == 0:
        return Paired(0, math.nan, math.nan, math.nan, math.nan)
    mean = float(diff.mean())
    if n < 2:
        return Paired(1, mean, math.nan, math.nan, math.nan)
    se = float(diff.std(ddof=1) / math.sqrt(n))
    if se == 0:
        return Paired(n, mean, mean, mean, 1.0 if mean == 0 else 0.0)
    half = float(sps.t.ppf(0.5 + confidence / 2, n - 1)) * se
    return Paired(n, mean, mean - half, mean + half, float(sps.ttest_1samp(diff, 0.0).pvalue))


def holm(pvalues: Iterable[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (same order as given); NaNs stay NaN and do not count in the family size.

    With m finite p-values sorted ascending p_(1) <= ... <= p_(m): adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)).
    Rejecting where adj <= alpha controls the family-wise error rate at alpha.
    """
    p = np.asarray(list(pvalues), dtype=float)
    adjusted = np.full_like(p, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m = len(order)
    running = 0.0
    for i, idx in enumerate(order):
        running = max(running, min(1.0, (m - i) * p[idx]))
        adjusted[idx] = running
    return adjusted


def prompt_values(prompts: pd.DataFrame, run_dirs: Iterable[str], metric: str) -> pd.Series:
    """A metric per (dataset, prompt id) over the given runs (one run per dataset and seed, so the keys are unique)."""
    rows = prompts[prompts["run_dir"].isin(list(run_dirs))]
    return rows.set_index(["dataset", "prompt_id"])[metric]


def rate_metric(prompts: pd.DataFrame, runs: Iterable[str]) -> str:
    """'decode_token_rate' when every prompt of these runs has it (the rate without prefill), else 'token_rate'."""
    rows = prompts[prompts["run_dir"].isin(list(runs))]
    return "decode_token_rate" if len(rows) and np.isfinite(rows["decode_token_rate"].to_numpy(float)).all() \
        else "token_rate"


def compare(prompts: pd.DataFrame, first: str | Sequence[str], second: str | Sequence[str]) -> dict:
    """Every PAIR_METRICS comparison of run `first` against run `second` (or of two lists of runs, one per dataset)
    on their common prompts.

    Columns per metric: `<m>_n`, `<m>_diff`, `<m>_low`, `<m>_high`, `<m>_p`; the token-rate metric is the decode
    rate when both runs record it (`rate` names the one used).
    """
    first, second = ([first] if isinstance(first, str) else list(first)), (
        [second] if isinstance(second, str) else list(second))
    rate = rate_metric(prompts, [*first, *second])
    out: dict = {"rate": rate}
    for metric in PAIR_METRICS:
        column = rate if metric == "token_rate" else metric
        a, b = prompt_values(prompts, first, column), prompt_values(prompts, second, column)
        common = a.index.intersection(b.index)
        res = paired(a.loc[common].to_numpy(float), b.loc[common].to_numpy(float))
        out.update({f"{metric}_n": res.n, f"{metric}_diff": res.mean, f"{metric}_low": res.low,
                    f"{metric}_high": res.high, f"{metric}_p": res.p})
    return out


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


def expectation_check(runs: pd.DataFrame, prompts: pd.DataFrame) -> str:
    """table_expectation.md: does the exact expected block efficiency agree with the measured one, run by run?

    Per drafting run and prompt: tokens generated minus the sum of the steps' expected emitted counts. Each step's
    emitted count minus its conditional expectation is a martingale difference and a prompt stops after at most
    max_new_tokens steps, so the sum has mean exactly 0 (optional stopping) when the expectation is exact. (The
    difference of the two block efficiencies divides that sum by the random number of target calls, which makes it
    slightly positive on average; hence the sums.) The t-test of each run rejects at 0.05 in about 5% of runs, and
    the mean over every prompt of every run is 0 within its SE; more rejections, or a pooled mean away from 0, says
    the expectation (or the verifier) is biased. Empty when no run records both.
    """
    drafted = runs[runs["budget"].notna() & np.isfinite(runs["expected_block_efficiency"].to_numpy(float))]
    rows, seen, pooled = [], set(), []
    for _, run in drafted.iterrows():
        mine = prompts[prompts["run_dir"] == run["run_dir"]]
        decoding = (*(run[k] for k in SETTING), run["method"], run["shape_tag"], run["seed"],
                    tuple(sorted(mine["prompt_id"])))
        if decoding in seen:  # the same shape, seed and prompts at two budget points (K3xL2 at L=2 and B=6)
            continue
        seen.add(decoding)
        d = ((mine["block_efficiency"] - mine["expected_block_efficiency"]) * mine["target_calls"]).to_numpy(float)
        d = d[np.isfinite(d)]
        pooled.append(d)
        se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
        exact = len(d) > 0 and bool(np.allclose(d, 0, rtol=0, atol=1e-9))
        if se > 0:
            z = float(d.mean() / se)
            p = float(2 * sps.t.sf(abs(z), len(d) - 1))
        else:  # no spread: exact agreement, or the same nonzero difference on every prompt (a bias, flagged)
            z, p = (math.nan, math.nan) if exact or not len(d) else (math.copysign(math.inf, d.mean()), 0.0)
        point = "" if run["budget_value"] == run["shape_tag"] else f" at {run['budget_value']}"
        rows.append({**{k: run[k] for k in SETTING}, "run": f"{method_label(run['method'])} {run['shape_tag']}{point}"
                     f"{' (tuning)' if run['selection_role'] == 'tune' else ''}",
                     "n": len(d), "diff": float(d.mean()) if len(d) else math.nan, "se": se, "z": z, "p": p,
                     "exact": exact})
    if not rows:
        return ""
    table = pd.DataFrame(rows)
    tested = table[table["p"].notna()]
    k, rejected = len(tested), int((tested["p"] < ALPHA).sum())
    lines = ["# Measured vs expected block efficiency", "",
             "Per drafting run: per prompt, the tokens generated minus the sum over its steps of the exact expected "
             "emitted count (block efficiency times target calls, measured minus expected); its mean over prompts, "
             "SE, z = mean/SE and the t-test's p. The sum has mean exactly 0 when the expectation is right, so about "
             f"{ALPHA:.0%} of runs reject at {ALPHA:g} by chance and the pooled mean is 0 within its SE. A shape run "
             "with the same seed on the same prompts at two budget points (e.g. K3xL2 at L = 2 and at B = 6) decodes "
             "the same tokens and is counted once.", ""]
    if k:
        binom = sps.binomtest(rejected, k, ALPHA, alternative="greater").pvalue
        every = np.concatenate(pooled)
        se = float(every.std(ddof=1) / math.sqrt(len(every))) if len(every) > 1 else math.nan
        lines += [f"- {k} runs whose verification is random: p < {ALPHA:g} in {rejected} ({rejected / k:.1%}; "
                  f"{ALPHA * k:.1f} expected by chance, binomial p = {binom:.2f} for this many or more)."]
        if se > 0:
            z = float(every.mean() / se)
            lines.append(f"- All {len(every)} prompts of those runs pooled: measured − expected = {every.mean():+.3f} "
                         f"± {se:.3f} tokens per prompt (z = {z:+.2f}, two-sided t-test p = "
                         f"{2 * sps.t.sf(abs(z), len(every) - 1):.2f}). "
                         "A bias test with the power of every run; per-run z of runs with few prompts are skewed, "
                         "so their mean is not one.")
    exact = int(table["exact"].sum())
    if exact:
        lines.append(f"- {exact} runs where measured and expected agree on every prompt (deterministic verification: "
                     "greedy, or every node one-hot).")
    flagged = tested[tested["p"] < ALPHA].sort_values("p")
    if len(flagged):
        lines += ["", "Runs with p < 0.05:", "",
                  "| setting | run | prompts | measured − expected tokens per prompt | z | p |",
                  "|---|---|---:|---:|---:|---:|"]
        lines += [f"| {setting_title(dict(zip(SETTING, (r[k] for k in SETTING))))} | {r['run']} | {r['n']} | "
                  f"{r['diff']:+.3f} ± {r['se']:.3f} | {r['z']:+.2f} | {fmt_p(r['p'])} |"
                  for _, r in flagged.iterrows()]
    return "\n".join(lines) + "\n"


def fmt_p(p: float) -> str:
    """'p=0.003', 'p<0.001', 'p=–' for NaN."""
    if not np.isfinite(p):
        return "p=–"
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def ranking_line(best_at_point: pd.DataFrame, pairs_at_point: pd.DataFrame) -> str:
    """The methods of one budget point, best first, each with the Holm-adjusted p of its gap to the one above.

    'RSD-S > RSD-C (p=0.003) > SpecTr (n.s., p=0.412)': '>' orders the means ('=' where they are equal, as greedy
    methods often are); '(n.s.)' marks a gap not significant at ALPHA after Holm. With several seeds, a gap's p is the
    largest over seeds (significant only if every seed's is).
    """
    drafted = best_at_point[best_at_point["budget"].notna()]
    by = rank_column(drafted)
    ranked = drafted.sort_values(by, ascending=False, kind="stable")
    order, means = ranked["method"].tolist(), ranked[by].to_numpy(float)
    text = method_label(order[0]) if order else ""
    for i, (hi, lo) in enumerate(zip(order, order[1:])):
        gap = pairs_at_point  # either orientation: the two-sided p does not depend on it
        if len(gap):
            gap = gap[((gap["first"] == hi) & (gap["second"] == lo)) | ((gap["first"] == lo) & (gap["second"] == hi))]
        p = float(gap[f"{by}_p_holm"].max()) if len(gap) else math.nan  # no pair: not compared, so n.s.
        note = fmt_p(p) if np.isfinite(p) and p <= ALPHA else f"n.s., {fmt_p(p)}"
        text += f" {'=' if np.isclose(means[i], means[i + 1], rtol=0, atol=1e-12) else '>'} {method_label(lo)} ({note})"
    return text + f"  [ranked by {'expected' if by.startswith('expected') else 'measured'} BE]"


def ranking_lines(best: pd.DataFrame, pairs: pd.DataFrame) -> dict[tuple, list[str]]:
    """Per (setting, budget kind): one ranking line per budget point, 'L=2: RSD-S > ...'."""
    lines: dict[tuple, list[str]] = {}
    drafted = best[best["budget"].notna()]
    for keys, group in drafted.groupby([*SETTING, "budget"], sort=True):
        out = []
        for x, point in group.groupby("x", sort=True):
            sel = pairs
            if len(pairs):
                mask = (pairs["kind"] == "best shape") & (pairs["budget"] == keys[-1]) & (pairs["x"] == x)
                for k, v in zip(SETTING, keys):
                    mask &= pairs[k] == v
                sel = pairs[mask]
            out.append(f"{KINDS[keys[-1]][1]}={x}: {ranking_line(point, sel)}")
        lines[keys] = out
    return lines


def diff_cell(row: Mapping, metric: str) -> str:
    """'+0.21 [+0.08, +0.34], p=0.002, Holm p=0.010' (' n.s.' appended when Holm's p > ALPHA); '–' if missing."""
    if not row[f"{metric}_n"] or not np.isfinite(row[f"{metric}_diff"]):
        return "–"
    ci = (f" [{row[f'{metric}_low']:+.2f}, {row[f'{metric}_high']:+.2f}]"
          if np.isfinite(row[f"{metric}_low"]) else "")
    mark = "" if np.isfinite(row[f"{metric}_p_holm"]) and row[f"{metric}_p_holm"] <= ALPHA else " n.s."
    return f"{row[f'{metric}_diff']:+.2f}{ci}, {fmt_p(row[f'{metric}_p'])}, Holm {fmt_p(row[f'{metric}_p_holm'])}{mark}"



def pairs_caption(family: pd.DataFrame) -> str:
    """What a pair table's cells are, which rate it uses and how its shapes were chosen."""
    rates = set(family["rate"])
    rate = ("decode token rate (tokens after the first / decode seconds, prefill excluded)" if rates == {
        "decode_token_rate"} else "token rate (generated tokens / wall seconds, prefill included)"
            + ("; rows marked ᵈ use the decode rate, recorded by both runs" if "decode_token_rate" in rates else ""))
    return ("Each cell: mean over prompts of the per-prompt difference (first method minus second), its 95% t "
            "interval, the paired t-test's p-value, and the p-value after Holm's correction over all comparisons of "
            f"this table (per metric; {ALPHA:g} family-wise); 'n.s.': not significant after Holm. n: prompts both runs "
            f"decoded. Token rate: {rate}. Shapes: the cell of the tables; 'tuned' = selected on tuning prompts "
            "disjoint from these, 'best of N' = best of N shapes on these same prompts (biased upward)."
            + (f" MBSU and token rate: {DIAL_NOTE}" if family["mix"].ne("").any() else ""))


def pairs_table(family: pd.DataFrame) -> str:
    """One family's comparisons as a pipe table, points in order, then pairs in ranking order."""
    symbol = KINDS[family["budget"].iloc[0]][1]
    lines = ["| point | comparison | shapes (how chosen) | n | " + " | ".join(PAIR_METRICS.values()) + " |",
             "|---|---|---|---:|" + "---|" * len(PAIR_METRICS)]
    for _, row in family.sort_values("x", kind="stable").iterrows():
        mark = "ᵈ" if row["rate"] == "decode_token_rate" and set(family["rate"]) != {"decode_token_rate"} else ""
        lines.append(f"| {symbol}={row['x']} | {method_label(row['first'])} − {method_label(row['second'])} | "
                     f"{row['chosen']} | {int(row['block_efficiency_n'])} | "
                     + " | ".join(diff_cell(row, m) + (mark if m == "token_rate" else "") for m in PAIR_METRICS)
                     + " |")
    return "\n".join(lines)


def pairs_markdown(best: pd.DataFrame, pairs: pd.DataFrame) -> str:
    """table_pairs.md: per (setting, budget kind) the ranking line per budget point, then per seed the best-shape
    comparisons and the same-draft (verifier) comparisons."""
    if pairs.empty:
        return "No two drafting methods were run on the same prompts, setting, seed and budget point.\n"
    lines_of = ranking_lines(best, pairs)
    parts = ["# Paired comparisons of methods on the same prompts", "",
             "Ranking lines: methods at each budget point ordered by their mean (expected block efficiency where "
             "every method records it, else measured); after each method, the Holm-adjusted p-value of its gap to "
             "the method before it (paired t-test over prompts); 'n.s.' = not significant at 0.05. Where several "
             "seeds were run, a gap counts only if it is significant for every seed.", ""]
    for keys, family in pairs.groupby([*SETTING, "budget"], sort=True):
        setting = dict(zip(SETTING, keys))
        kind = keys[-1]
        parts += [f"## {setting_title(setting)}; {KINDS[kind][0]}", ""]
        parts += [f"- {line}" for line in lines_of.get(keys, [])] + [""]
        for (seed, comparison), sub in family.groupby(["seed", "kind"], sort=True):
            what = ("Best shape per method" if comparison == "best shape" else
                    "Same drafts, two verifiers (BV vs SD on the same chains, TV vs RSD-C on the same trees)")
            parts += [f"### {what}; seed {seed}", "", pairs_caption(sub), "", pairs_table(sub), ""]
    return "\n".join(parts)
