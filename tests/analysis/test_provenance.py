"""Provenance and timing labels (issue 34): run.json's git state, the report's list of runs from modified checkouts,
the study script's defaults against the committed study, figures that say where their timings came from."""

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.figures import figures
from analysis.load import load
from analysis.run_tables import compute_table
from helpers.config import ROOT
from helpers.runs import record, write_run
from rsd.harness.execute import git_state

V3 = ROOT / "docs" / "results" / "embedded-v3"


def test_git_state_flags_a_modified_checkout_and_hashes_its_diff(tmp_path):
    def git(*args):
        subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-qm", "one")
    clean = git_state(tmp_path)
    assert clean["rsd_git_dirty"] is False and clean["rsd_git_diff_sha256"] is None and len(clean["rsd_git_sha"]) == 40
    (tmp_path / "a.py").write_text("x = 2\n")
    dirty = git_state(tmp_path)
    assert dirty["rsd_git_dirty"] is True and dirty["rsd_git_sha"] == clean["rsd_git_sha"]
    (tmp_path / "a.py").write_text("x = 3\n")
    assert re.fullmatch(r"[0-9a-f]{64}", dirty["rsd_git_diff_sha256"])
    assert git_state(tmp_path)["rsd_git_diff_sha256"] != dirty["rsd_git_diff_sha256"]
    outside = tmp_path / "not-a-checkout"
    outside.mkdir()
    (outside / ".git").write_text("gitdir: /nonexistent\n")  # a broken checkout: nothing recorded, nothing raised
    assert git_state(outside) == {"rsd_git_sha": None, "rsd_git_dirty": None, "rsd_git_diff_sha256": None}


def runs_with_environment(root: Path, loads: dict[str, float]) -> Path:
    for name, load_average in loads.items():
        method = "ar" if name == "ar" else "sd"
        recs = [record(f"p{i}", [0] * 4 if method == "ar" else [1, 0, 1], 1.0, 40.0, 0 if method == "ar" else 2,
                       0 if method == "ar" else 2) for i in range(2)]
        run_dir = write_run(root, name, method, {} if method == "ar" else {"draft_length": 2},
                            "none" if method == "ar" else "L2", None if method == "ar" else "fixed_length",
                            None if method == "ar" else 2, recs, 40.0)
        meta = json.loads((run_dir / "run.json").read_text())
        dirty = name == "ar"
        meta["environment"] = {"load_average": [load_average, 1.0, 1.0], "cpu_count": 2, "rsd_git_sha": "ab" * 20,
                               "rsd_git_dirty": dirty, "rsd_git_diff_sha256": "cd" * 32 if dirty else None}
        (run_dir / "run.json").write_text(json.dumps(meta))
    return root


def test_the_report_lists_runs_from_modified_checkouts_and_the_figures_their_load(tmp_path):
    tables = load([runs_with_environment(tmp_path, {"ar": 2.1, "sd": 0.6})])
    text = compute_table(tables.runs)
    assert "1 clean, 1 modified, 0 not recorded" in text and "ababababab (2)" in text
    assert "| AR | none | ababababab | cdcdcdcdcdcdcdcd |" in text
    [fig] = [f for stem, f in figures(tables) if stem.endswith("_fixed_length")]
    assert "timed at load 0.6-2.1 on 2 CPUs" in fig.axes[2].get_title()


def test_committed_runs_predate_the_flag_and_say_so():
    """The committed study's runs made before run.json recorded the tree: counted as not recorded, not as clean."""
    text = (V3 / "table_compute.md").read_text()
    runs = pd.read_csv(V3 / "runs.csv", keep_default_na=False)
    assert f"{int((runs['git_tree'] == '').sum())} not recorded" in text


def test_study_script_defaults_reproduce_the_committed_study():
    script = (ROOT / "experiments" / "study.sh").read_text()
    [default] = re.findall(r"RSD_RATES_PROMPTS:-(\d+)", script)
    rates = pd.read_csv(V3 / "rates" / "runs.csv")
    assert set(rates["prompts"]) == {int(default)}  # the committed rates pass decoded this many prompts per set
    assert 'RSD_RATES_PROMPTS=$rates_prompts' in script  # and the script prints the value it uses


def test_committed_selection_is_reproduced_by_its_preset_criterion():
    """The fixed-compute preset pins the run-level criterion the study ran with: ranking the committed tuning runs
    by it picks every evaluated shape (75 of 75 cells)."""
    from helpers.config import compose_cfg

    assert compose_cfg("experiment=study_v3_fixed_compute").budget.select.by == "ratio_of_sums"
    runs = pd.read_csv(V3 / "runs.csv", keep_default_na=False)
    runs = runs[runs["model_pair"] == "smollm2"] if "model_pair" in runs else runs
    tune = runs[(runs["selection_role"] == "tune") & (runs["mix"].astype(str) == "")]
    evaluated = runs[(runs["selection_role"] == "eval") & (runs["mix"].astype(str) == "")]
    keys = ["dataset", "budget", "x", "method"]
    cells = 0
    for key, cell in evaluated.groupby(keys):
        candidates = tune.set_index(keys).loc[[key]].reset_index()
        best = candidates.sort_values(["expected_block_efficiency", "shape_tag"], ascending=[False, True]).iloc[0]
        assert set(cell["shape_tag"]) == {best["shape_tag"]}, key
        cells += 1
    assert cells == 75
    assert "12 of 75 cells" in (V3 / "table_selection.md").read_text()
    assert np.isfinite(tune["expected_block_efficiency"].astype(float)).all()

