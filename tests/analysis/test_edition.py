"""The third edition's answers to the paper's orderings, and its page: every comparison on
docs/results/embedded-eagle/README.md is what the committed CSVs next to it say."""

import math
from pathlib import Path

import pandas as pd
import pytest
import scipy.stats as sps

from analysis.answers import Answer, answer_cell, claim_answer, ordering_answers
from analysis.edition import page

EDITION = Path(__file__).resolve().parents[2] / "docs" / "results" / "embedded-eagle"


@pytest.mark.parametrize("diff, low, high, p, verdict", [
    (0.10, 0.04, 0.16, 0.001, "reproduced"),
    (-0.10, -0.16, -0.04, 0.001, "reversed"),
    (0.01, -0.04, 0.049, 0.6, "equal within ±0.05"),
    (0.01, -0.06, 0.08, 0.6, "undecided"),
    (0.06, 0.01, 0.11, 0.2, "undecided"),  # the raw CI excludes 0, but not after Holm: not reproduced
])
def test_verdicts(diff, low, high, p, verdict):
    assert Answer("rsd_s", "rsd_c", diff, low, high, p, 48).verdict(p) == verdict


@pytest.mark.parametrize("diff, family", [(0.0, 16), (0.03, 16), (-0.03, 4), (0.045, 16), (0.08, 16), (0.2, 1)])
def test_prompts_to_decide_is_the_first_count_that_decides_at_the_observed_gap_and_spread(diff, family):
    """At the returned count the gap is significant after Bonferroni or the CI lies within ±0.05 (normal
    approximation, the spread of the t interval it came from); one prompt fewer, neither."""
    n, half = 48, 0.07
    answer = Answer("rsd_s", "rsd_c", diff, diff - half, diff + half, 0.5, n)
    sd = half / sps.t.ppf(0.975, n - 1) * math.sqrt(n)

    def decided(m: int) -> bool:
        se = sd / math.sqrt(m)
        return (abs(diff) / se >= sps.norm.ppf(1 - 0.05 / (2 * family))
                or abs(diff) + sps.norm.ppf(0.975) * se <= 0.05)

    needed = answer.prompts_to_decide(family)
    assert decided(needed) and not decided(needed - 1)
    assert Answer("rsd_s", "rsd_c", diff, diff, diff, 0.5, n).prompts_to_decide(family) is None  # no spread


def pair_row(first, second, diff, low, high, p, x=2):
    metric = "expected_block_efficiency"
    return {"model_pair": "m", "draft": "d", "mix": "", "dtype": "float32", "dataset": "s", "prompt_set": "48",
            "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 32, "budget": "fixed_length", "x": x,
            "seed": 0, "kind": "best shape", "first": first, "second": second, "ranked_by": metric,
            f"{metric}_diff": diff, f"{metric}_low": low, f"{metric}_high": high, f"{metric}_p": p,
            f"{metric}_n": 48}


def test_a_pair_listed_lower_method_first_is_turned_round():
    """Pair rows put the method ranked higher first; the answer is always paper-higher minus paper-lower."""
    point = pd.DataFrame([pair_row("rsd_c", "rsd_s", 0.08, 0.03, 0.13, 0.01)])
    answer = claim_answer(point, "rsd_s", "rsd_c")
    assert (answer.diff, answer.low, answer.high) == (-0.08, -0.13, -0.03) and answer.verdict(0.01) == "reversed"
    assert claim_answer(point, "spectr", "specinfer") is None


def test_every_adjacent_claim_at_every_point_is_answered_once():
    rows = [pair_row(a, b, 0.1, 0.05, 0.15, 0.001, x) for x in (2, 3)
            for a, b in (("rsd_s", "rsd_c"), ("rsd_c", "spectr"), ("spectr", "specinfer"), ("specinfer", "sd"),
                         ("rsd_s", "sd"))]
    answers = ordering_answers(pd.DataFrame(rows))
    assert len(answers) == 8 and set(answers["verdict"]) == {"reproduced"}
    assert answers["p_holm"].tolist() == pytest.approx([0.008] * 8)  # Holm over the 8 claims asked, not the 10 pairs
    assert not ((answers["higher"] == "rsd_s") & (answers["lower"] == "sd")).any()  # not adjacent in the order
    assert answers["prompts_to_decide"].isna().all()  # only an undecided claim gets a count


def test_an_undecided_claim_says_how_many_prompts_would_decide_it():
    rows = [pair_row("rsd_s", "rsd_c", 0.1, 0.05, 0.15, 0.001), pair_row("rsd_c", "spectr", 0.0, -0.07, 0.07, 1.0)]
    answers = ordering_answers(pd.DataFrame(rows)).set_index("higher")
    assert answers.loc["rsd_c", "verdict"] == "undecided" and answers.loc["rsd_c", "prompts_to_decide"] == 90
    assert answer_cell(answers.loc["rsd_c"]).endswith("undecided (~90 prompts)")


def test_the_committed_page_is_what_its_tables_say():
    assert (EDITION / "README.md").read_text() == page(EDITION), "rerun: python -m analysis.edition ..."


def test_the_committed_edition_never_averages_across_prompt_sets():
    """Every comparison of the third edition is within one prompt set (write_edition builds without pooled rows)."""
    names = ("answers.csv", "eagle.csv", "trend.csv", "pairs.csv", "rates.csv", "costs.csv", "control.csv",
             "rates/pairs.csv", "control/pairs.csv")
    for name in names:
        path = EDITION / name
        if path.is_file() and path.stat().st_size > 1:
            datasets = pd.read_csv(path, keep_default_na=False)["dataset"].astype(str)
            assert not datasets.str.contains("+", regex=False).any(), name
