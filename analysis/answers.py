"""The paper's ordering questions, answered from a report's paired comparisons (analysis.pairs).

The paper's claim at every budget point: RSD-S >= RSD-C >= SpecTr >= SpecInfer >= SD. Each adjacent pair of that
order is one question, answered from the one best-shape comparison of the two methods at the point (its difference
in the metric the pair table ranks by, the 95% CI of that paired difference and its p). Holm's correction runs over
the questions asked, not over every pair of methods: one family per setting, budget kind and seed, all its points
and claims together (the pair table's Holm, over every pair of methods, is stricter than the questions need):
- reproduced: the paper's higher method is ahead, significant after Holm (p_holm < 0.05);
- reversed: it is behind, significant after Holm;
- equal within ±0.05: not significant, and the whole CI lies within ±0.05 tokens per call (a bound, not a tie);
- undecided: neither. Its row says how many paired prompts would decide it if the observed gap and spread held
  (`prompts_to_decide`): a planning estimate for adding prompts, not a result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import scipy.stats as sps

from analysis.columns import SETTING
from analysis.names import method_label
from analysis.stats import holm

PAPER_ORDER = ("rsd_s", "rsd_c", "spectr", "specinfer", "sd")
CLAIMS = tuple(zip(PAPER_ORDER, PAPER_ORDER[1:]))  # (higher, lower): the adjacent pairs of the paper's order
ALPHA = 0.05
BOUND = 0.05  # tokens per target call
VERDICTS = ("reproduced", "reversed", "equal within ±0.05", "undecided")
MINUS = "\u2212"


@dataclass(frozen=True)
class Answer:
    """higher - lower at one point: the paired difference, its 95% CI, its p and the prompts paired."""

    higher: str
    lower: str
    diff: float
    low: float
    high: float
    p: float
    n: int

    def verdict(self, p_holm: float) -> str:
        """The answer, given this comparison's p after Holm over its family."""
        if p_holm < ALPHA:
            return "reproduced" if self.diff > 0 else "reversed"
        if -BOUND <= self.low and self.high <= BOUND:
            return "equal within ±0.05"
        return "undecided"

    def prompts_to_decide(self, family_size: int) -> int | None:
        """Paired prompts at which this gap and spread would be decided: significant after Bonferroni over the family
        (which Holm never does worse than) or bounded within ±BOUND, whichever comes first; normal approximation,
        the spread backed out of the t interval. None when the interval has no width."""
        if self.n < 2 or not self.high > self.low:
            return None
        sd = (self.high - self.low) / (2 * float(sps.t.ppf(1 - ALPHA / 2, self.n - 1))) * math.sqrt(self.n)
        gap = abs(self.diff)
        needed = []
        if gap > 0:
            needed.append((float(sps.norm.ppf(1 - ALPHA / (2 * family_size))) * sd / gap) ** 2)
        if gap < BOUND:
            needed.append((float(sps.norm.ppf(1 - ALPHA / 2)) * sd / (BOUND - gap)) ** 2)
        return math.ceil(min(needed))


def claim_answer(point: pd.DataFrame, higher: str, lower: str) -> Answer | None:
    """The answer for `higher >= lower` from the best-shape comparison of the two at one point (None: not both ran)."""
    rows = point[(point["kind"] == "best shape") & (((point["first"] == higher) & (point["second"] == lower))
                                                   | ((point["first"] == lower) & (point["second"] == higher)))]
    if rows.empty:
        return None
    [row] = [r for _, r in rows.iterrows()]
    metric = row["ranked_by"]
    sign = 1.0 if row["first"] == higher else -1.0  # a pair row puts the method ranked higher first
    diff, low, high = (sign * float(row[f"{metric}_{k}"]) for k in ("diff", "low", "high"))
    return Answer(higher, lower, diff, min(low, high), max(low, high), float(row[f"{metric}_p"]),
                  int(row[f"{metric}_n"]))


def ordering_answers(pairs: pd.DataFrame, claims: Sequence[tuple[str, str]] = CLAIMS) -> pd.DataFrame:
    """One row per setting, budget point, seed and claim that both methods ran: the Answer's fields, the metric, p
    after Holm over the claims of its family (setting, budget kind, seed) and the verdict."""
    rows = []
    for _, family in pairs.groupby([*SETTING, "budget", "seed"], sort=True, dropna=False):
        answers = []
        for keys, point in family.groupby([*SETTING, "budget", "x", "seed"], sort=True, dropna=False):
            for higher, lower in claims:
                answer = claim_answer(point, higher, lower)
                if answer is not None:
                    answers.append((dict(zip([*SETTING, "budget", "x", "seed"], keys)), answer,
                                    point["ranked_by"].iloc[0]))
        family_size = sum(math.isfinite(a.p) for _, a, _ in answers)
        for (keys, answer, metric), p_holm in zip(answers, holm([a.p for _, a, _ in answers])):
            verdict = answer.verdict(float(p_holm))
            rows.append({**keys, **answer.__dict__, "metric": metric, "p_holm": float(p_holm), "verdict": verdict,
                         "prompts_to_decide": answer.prompts_to_decide(family_size) if verdict == "undecided"
                         else None})
    return pd.DataFrame(rows)


def signed(value: float, places: int = 3) -> str:
    return f"{value:+.{places}f}".replace("-", MINUS)


def answer_cell(row: pd.Series, words: dict[str, str] | None = None) -> str:
    """'+0.031 (−0.012, +0.074), p = 0.41: undecided (~210 prompts)' (`words` renames verdicts; the prompts that
    would decide an undecided one, where the row has them)."""
    p = "p < 0.001" if row["p_holm"] < 0.001 else f"p = {row['p_holm']:.3f}"
    verdict = (words or {}).get(row["verdict"], row["verdict"])
    needed = row.get("prompts_to_decide")
    more = f" (~{int(needed)} prompts)" if needed is not None and pd.notna(needed) else ""
    return f"{signed(row['diff'])} ({signed(row['low'])}, {signed(row['high'])}), {p}: {verdict}{more}"


def claims_table(group: pd.DataFrame, title: str, point: str, label: Callable[[Any], str], head: str) -> str:
    """One table of answers: `title`, then one row per value of column `point` (its first cell `label(value)`, under
    `head`), one column per claim of the paper's order that `group` answers."""
    claims = [c for c in CLAIMS if ((group["higher"] == c[0]) & (group["lower"] == c[1])).any()]
    head = [head] + [f"{method_label(h)} ≥ {method_label(lo)}" for h, lo in claims]
    lines = [title, "", "| " + " | ".join(head) + " |", "|---|" + "---|" * len(claims)]
    for value, at in group.groupby(point, sort=True):
        cells = []
        for h, lo in claims:
            match = at[(at["higher"] == h) & (at["lower"] == lo)]
            cells.append(answer_cell(match.iloc[0]) if len(match) else "–")
        lines.append(f"| {label(value)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def answers_markdown(answers: pd.DataFrame) -> str:
    """Per setting and budget kind: one row per budget point, one column per claim of the paper's order."""
    if answers.empty:
        return "No point ran two adjacent methods of the paper's order.\n"
    out = []
    for keys, group in answers.groupby([*SETTING, "budget", "seed"], sort=True, dropna=False):
        setting = dict(zip([*SETTING, "budget", "seed"], keys))
        title = (f"**{setting['dataset']}, T = {setting['temperature']}, {setting['budget']}, seed {setting['seed']}**"
                 f" ({group['metric'].iloc[0]}, higher − lower, 95% CI, Holm p)")
        letter = "L" if setting["budget"] == "fixed_length" else "B"
        out.append(claims_table(group, title, "x", lambda x, letter=letter: f"{letter} = {x}", "point"))
    return "\n\n".join(out) + "\n"


def answers_sentence(answers: pd.DataFrame, words: dict[str, str] | None = None,
                     noun: str = "adjacent comparisons") -> str:
    """How many comparisons each verdict got (named by `words`, default the verdicts), per dataset, temperature and
    budget kind."""
    if answers.empty:
        return "No point ran two adjacent methods of the paper's order."
    words = words or {v: v for v in VERDICTS}
    parts = []
    for (dataset, temperature, budget), group in answers.groupby(["dataset", "temperature", "budget"], sort=True):
        counts = group["verdict"].value_counts()
        tally = ", ".join(f"{int(counts.get(v, 0))} {words[v]}" for v in VERDICTS)
        needed = group["prompts_to_decide"].dropna() if "prompts_to_decide" in group else pd.Series(dtype=float)
        if len(needed):
            tally += f" (deciding all would take up to ~{int(needed.max())} prompts, now {int(group['n'].max())})"
        parts.append(f"{dataset} at T = {temperature}, {budget.replace('_', ' ')}: of {len(group)} {noun}, {tally}")
    return "; ".join(parts) + "."
