"""The draft as a control (analysis/control.py): a method with two drafts on the same prompts, paired per prompt."""

import statistics

import pytest

from analysis.control import control_markdown, control_rows, control_sentence
from analysis.load import load
from helpers.runs import record, write_run

SD = ([1, 1, 0, 1], [0, 1], [1, 1, 1])
HEAD_SPECTR = ([2, 2, 1, 2], [1, 2], [2, 1, 2])
V3_SPECTR = ([1, 2, 0, 1], [0, 1], [1, 1, 2])


def study(root, spectr_steps):
    write_run(root, "ar", "ar", {}, "none", None, None, [record(f"p{i}", [0] * 4, 2.0, 50.0, 0, 0)
                                                        for i in range(3)], 50.0)
    write_run(root, "pld", "pld", {"draft_length": 2}, "L2", "fixed_length", 2,  # no draft model: the same decode
              [record(f"p{i}", a, 1.0, 50.0, 0, 2) for i, a in enumerate(SD)], 50.0, draft_params=0)
    for method, steps in (("sd", SD), ("spectr", spectr_steps)):
        recs = [record(f"p{i}", a, 1.0, 50.0, 2, 2) for i, a in enumerate(steps)]
        write_run(root, method, method, {"draft_length": 2}, "L2", "fixed_length", 2, recs, 50.0)
    tables = load([root])
    return tables.runs, tables.prompts


def per_prompt(steps):
    return [(sum(a) + len(a)) / len(a) for a in steps]  # tokens per target call of each prompt


def test_the_head_minus_v3_and_each_drafts_gain_over_sd(tmp_path):
    head, v3 = study(tmp_path / "head", HEAD_SPECTR), study(tmp_path / "v3", V3_SPECTR)
    frame = control_rows(head, v3, metric="block_efficiency")
    spectr = frame[frame["method"] == "spectr"].iloc[0]
    diffs = [a - b for a, b in zip(per_prompt(HEAD_SPECTR), per_prompt(V3_SPECTR))]
    assert spectr["n"] == 3 and spectr["diff"] == pytest.approx(statistics.mean(diffs))
    assert spectr["gain_over_sd_head"] == pytest.approx(statistics.mean(per_prompt(HEAD_SPECTR))
                                                        - statistics.mean(per_prompt(SD)))
    assert spectr["gain_over_sd_v3"] == pytest.approx(statistics.mean(per_prompt(V3_SPECTR))
                                                      - statistics.mean(per_prompt(SD)))
    sd = frame[frame["method"] == "sd"].iloc[0]
    assert sd["diff"] == 0 and sd["p_holm"] == 1.0  # the same draft steps: no difference
    assert "| dolly_builtin | 1.0 | L = 2 | SpecTr |" in control_markdown(frame)
    assert set(frame["method"]) == {"sd", "spectr"}  # PLD uses no draft model: no row


def test_the_sentence_counts_what_the_table_says(tmp_path):
    head, v3 = study(tmp_path / "head", HEAD_SPECTR), study(tmp_path / "v3", V3_SPECTR)
    frame = control_rows(head, v3, metric="block_efficiency")
    gain = lambda steps: statistics.mean(per_prompt(steps)) - statistics.mean(per_prompt(SD))  # noqa: E731
    frame.loc[frame["method"] == "spectr", "p_holm"] = 0.01  # as if significant
    sentence = control_sentence(frame)
    assert sentence.startswith("dolly_builtin at T = 1: of 2 cells (method and point), the head is higher in 1, "
                               "lower in 0, not different after Holm in 1")
    assert f"{gain(HEAD_SPECTR):+.3f} with the head and {gain(V3_SPECTR):+.3f} with v3" in sentence
    assert sentence in control_markdown(frame)


def test_no_control_pass_says_so():
    import pandas as pd

    assert "has not run yet" in control_markdown(pd.DataFrame())
