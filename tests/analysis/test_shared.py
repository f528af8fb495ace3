"""The shared-context answers (analysis/shared.py): paired per prompt across methods that replayed one reference,
Holm over each dataset and temperature, and a refusal when two methods replayed different references."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.archive import unpack
from analysis.shared import (
    headline,
    load_shared,
    means_sentence,
    pack_shared,
    shared_answers,
    shared_means,
    undecided_sentence,
    widths_sentence,
    with_own_widths,
)


def write(root, method, length, yields, references=None, dataset="dolly_builtin"):
    path = root / dataset / "T1" / f"L{length}" / f"{method}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i, per_context in enumerate(yields):
            ref = references[i] if references else [7, 8, 9]
            f.write(json.dumps({"prompt_id": f"p{i}", "method": method, "reference": ref,
                                "expected_emitted": list(per_context)}) + "\n")


def noisy(base, n, seed, contexts=3):
    rng = np.random.default_rng(seed)
    return base + rng.normal(0, 0.02, (n, contexts))


def test_a_clear_gap_is_reproduced_and_a_reversal_is_reversed(tmp_path):
    n = 20
    prompt_level = np.random.default_rng(0).uniform(1.5, 2.5, (n, 1))  # shared by every method: cancels in pairs
    write(tmp_path, "rsd_s", 3, prompt_level + 0.2 + noisy(0, n, 1))
    write(tmp_path, "rsd_c", 3, prompt_level + noisy(0, n, 2))
    write(tmp_path, "spectr", 3, prompt_level + 0.3 + noisy(0, n, 3))
    answers = shared_answers(load_shared(tmp_path)).set_index(["higher", "lower"])
    assert answers.loc[("rsd_s", "rsd_c"), "verdict"] == "reproduced"
    assert answers.loc[("rsd_c", "spectr"), "verdict"] == "reversed"
    assert answers.loc[("rsd_s", "rsd_c"), "diff"] == pytest.approx(0.2, abs=0.02)
    assert (answers["n"] == n).all()
    assert answers["p_holm"].ge(answers["p"]).all()


def test_equal_methods_are_bounded_within_the_band(tmp_path):
    n = 30
    level = np.random.default_rng(4).uniform(1.5, 2.5, (n, 1))
    write(tmp_path, "specinfer", 2, level + noisy(0, n, 5))
    write(tmp_path, "sd", 2, level + noisy(0, n, 6))
    [row] = shared_answers(load_shared(tmp_path)).to_dict("records")
    assert row["verdict"] == "equal within ±0.05" and row["prompts_to_decide"] is None


def test_a_method_enters_once_it_has_every_prompt(tmp_path):
    write(tmp_path, "rsd_c", 2, np.ones((3, 3)))
    write(tmp_path, "spectr", 2, np.ones((2, 3)))  # a pass still running
    assert set(load_shared(tmp_path)["method"]) == {"rsd_c"}


def test_different_references_are_refused(tmp_path):
    write(tmp_path, "rsd_c", 2, np.ones((2, 3)), references=[[1, 2, 3], [4, 5, 6]])
    write(tmp_path, "spectr", 2, np.ones((2, 3)), references=[[1, 2, 3], [4, 5, 0]])
    with pytest.raises(ValueError, match="'p1'.*different references"):
        load_shared(tmp_path)


def test_widths_compare_the_same_claim_on_as_many_prompts(tmp_path):
    answers = pd.DataFrame([{"dataset": "d", "temperature": 1.0, "L": 2, "higher": "rsd_c", "lower": "spectr",
                             "n": 48, "low": -0.02, "high": 0.02}])
    own = pd.DataFrame([{"budget": "fixed_length", "dataset": "d", "temperature": 1.0, "x": 2, "higher": "rsd_c",
                         "lower": "spectr", "n": 48, "low": -0.1, "high": 0.1},
                        {"budget": "fixed_length", "dataset": "d", "temperature": 1.0, "x": 2, "higher": "rsd_c",
                         "lower": "spectr", "n": 40, "low": -0.5, "high": 0.5}])
    widened = with_own_widths(answers, own)
    assert widened["own_width"].iloc[0] == pytest.approx(0.2)
    assert "5.0 times as wide" in widths_sentence(widened) and "about 25 times" in widths_sentence(widened)
    assert math.isnan(with_own_widths(answers.assign(n=47), own)["own_width"].iloc[0])


def test_pack_and_unpack_give_back_the_records(tmp_path):
    root = tmp_path / "embedded-eagle-shared"
    write(root, "sd", 2, np.ones((2, 3)))
    [archive] = pack_shared(root, tmp_path / "archives")
    assert pack_shared(root, tmp_path / "archives") == []  # unchanged records: the same bytes, nothing rewritten
    unpack(tmp_path / "archives", tmp_path / "back")
    assert load_shared(tmp_path / "back" / "embedded-eagle-shared").equals(load_shared(root))
    assert archive.name == "embedded-eagle-shared__dolly_builtin__T1.tar.gz"


def test_means_sit_beside_the_own_context_expected_block_efficiency(tmp_path):
    write(tmp_path, "sd", 3, np.full((4, 3), 1.5))
    write(tmp_path, "rsd_c", 3, np.full((4, 3), 1.75))
    runs = pd.DataFrame([{"budget": "fixed_length", "dataset": "dolly_builtin", "temperature": 1.0, "x": 3,
                          "method": "sd", "expected_block_efficiency_prompt_mean": 1.45,
                          "expected_block_efficiency_se": 0.01}])
    means = shared_means(load_shared(tmp_path), runs).set_index("method")
    assert means.loc["sd", "shared"] == pytest.approx(1.5) and means.loc["sd", "own"] == 1.45
    assert math.isnan(means.loc["rsd_c", "own"]) and (means["n"] == 4).all()
    assert "over the 1 method and L cells with both" in means_sentence(means.reset_index())
    assert "+0.050 on average" in means_sentence(means.reset_index())
    assert "1 of 1 beyond 1.96" in means_sentence(means.reset_index())


def test_the_undecided_comparisons_are_named_with_the_prompts_they_need():
    answers = pd.DataFrame([
        {"dataset": "xsum_builtin", "L": 4, "higher": "rsd_c", "lower": "spectr", "verdict": "undecided",
         "prompts_to_decide": 62.0},
        {"dataset": "dolly_builtin", "L": 5, "higher": "rsd_c", "lower": "spectr", "verdict": "undecided",
         "prompts_to_decide": 197.0},
        {"dataset": "dolly_builtin", "L": 2, "higher": "rsd_c", "lower": "spectr", "verdict": "undecided",
         "prompts_to_decide": 60.0},
        {"dataset": "dolly_builtin", "L": 3, "higher": "spectr", "lower": "specinfer", "verdict": "reproduced",
         "prompts_to_decide": np.nan},
    ])
    assert undecided_sentence(answers) == (" Undecided: RSD-C ≥ SpecTr (dolly_builtin L = 2, 5; xsum_builtin L = 4);"
                                           " deciding them would take up to ~197 prompts per set.")
    assert undecided_sentence(answers[answers["verdict"] != "undecided"]) == ""


def test_the_readme_states_the_committed_shared_context_answers():
    root = Path(__file__).resolve().parents[2]
    shared = root / "docs" / "results" / "embedded-eagle" / "shared.csv"
    answers = pd.read_csv(shared)
    readme = (root / "README.md").read_text().replace("\n", " ")
    for sentence in (headline(answers), widths_sentence(answers)):
        assert sentence and sentence in readme
