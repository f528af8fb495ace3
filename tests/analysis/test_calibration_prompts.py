"""Calibration recomputes the target's law on the very token ids a run decoded: truncated prompts and tuning runs."""

import json
from pathlib import Path

from analysis.calibration import calibrate_run
from analysis.load import completed, find_run_dirs
from helpers.config import run_cfg
from rsd.harness.runner import run
from rsd.harness.schema import stored_blocks
from rsd.models.pairs import load_pair


def test_calibration_uses_the_runs_truncated_prompts_and_its_tuning_split(tmp_path):
    """A run with dataset.max_prompt_tokens and budget.select: every run directory (tuning runs included) is
    calibrated, and each forward pass reads the record's prompt as decoded (its recorded length), not the full text."""
    run(run_cfg("model_pair=tiny_llama", "drafter=spectr", "budget=fixed_compute", "budget.target_tokens=2",
                "budget.select={prompts:2,top:1}", "dataset.num_prompts=2", "dataset.max_prompt_tokens=12",
                "sampling.max_new_tokens=6", f"out_dir={tmp_path}"))
    dirs = completed(find_run_dirs([tmp_path]))
    assert len(dirs) == 3  # two tuning runs (K1xL2, K2xL1) and the selected one
    summary = json.loads((dirs[0] / "summary.json").read_text())
    pair = load_pair(stored_blocks(summary["config"])[0], need_draft=False)
    forward = pair.target.model.forward
    seen = []

    def recording(*args, **kwargs):
        seen.append(kwargs["input_ids"].shape[-1])
        return forward(*args, **kwargs)

    pair.target.model.forward = recording
    try:
        for run_dir in dirs:
            seen.clear()
            records = [json.loads(x) for x in (Path(run_dir) / "records.jsonl").read_text().splitlines()]
            calibrate_run(Path(run_dir), pair)
            assert any("prompt_tokens_before_truncation" in r for r in records)
            assert seen == [r["prompt_tokens"] + len(r["new_token_ids"]) for r in records if r["new_token_ids"]]
    finally:
        pair.target.model.forward = forward
