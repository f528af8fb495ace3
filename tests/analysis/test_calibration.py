"""Calibration of recorded runs against the target's law: a lossless run passes, a biased one fails."""

import json
from pathlib import Path

import torch

from analysis.calibration import calibrate_run, main
from helpers.config import run_cfg
from rsd.data import load_examples
from rsd.harness.runner import run
from rsd.harness.schema import stored_blocks
from rsd.models.pairs import load_pair


@torch.inference_mode()
def greedy_rewrite(run_dir: Path, summary: dict) -> None:
    """Replace every recorded continuation by the target's greedy one of the same length (a biased 'method')."""
    pair_cfg, dataset, _ = stored_blocks(summary["config"])
    pair = load_pair(pair_cfg, need_draft=False)
    prompts = {ex.id: pair.encode_prompt(ex.prompt) for ex in load_examples(dataset)}
    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    for r in records:
        seq = list(prompts[r["prompt_id"]])
        for _ in r["new_token_ids"]:
            seq.append(int(pair.target.model(input_ids=torch.tensor([seq])).logits[0, -1].argmax()))
        r["new_token_ids"] = seq[len(prompts[r["prompt_id"]]):]
    (run_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_lossless_run_is_calibrated_and_a_greedy_rewrite_is_not(tmp_path):
    [summary] = run(run_cfg("model_pair=tiny_llama", "model_pair.tiny.init_std=0.2", "drafter=rsd_s",
                            "dataset.num_prompts=6", "sampling.max_new_tokens=60", f"out_dir={tmp_path}"))
    run_dir = Path(summary["run_dir"])
    good = calibrate_run(run_dir)
    assert good.tokens == summary["new_tokens"] and good.passed, good
    assert main([str(tmp_path)]) == 0
    greedy_rewrite(run_dir, summary)
    bad = calibrate_run(run_dir)
    assert not bad.passed and bad.z > 5 and bad.ks_p < 1e-6, bad
    assert main([str(tmp_path)]) == 1
