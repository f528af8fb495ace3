"""The third edition's answers to the paper's orderings, and its page: every comparison on
docs/results/embedded-eagle/README.md is what the committed CSVs next to it say."""

from pathlib import Path

import pandas as pd
import pytest

from analysis.answers import Answer, claim_answer, ordering_answers
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


def test_the_committed_page_is_what_its_tables_say():
    assert (EDITION / "README.md").read_text() == page(EDITION), "rerun: python -m analysis.edition ..."
