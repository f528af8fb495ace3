"""Plan a fixed set of configs on the tiny pair and print each run's directory (below out_dir) and identity as JSON.

`python tests/golden/make_run_dirs.py > tests/golden/run_dirs.json` wrote the fixture that test_runner.py compares
against (generated before the config resolution was typed; regenerate only for a change meant to rename runs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers.config import compose_cfg  # noqa: E402
from rsd.data import load_examples  # noqa: E402
from rsd.harness.config import resolve_config  # noqa: E402
from rsd.harness.runs import plan_runs, run_inputs  # noqa: E402

OUT = "/rsd-golden-out"
DRAFTERS = ("ar", "sd", "bv", "specinfer", "spectr", "rsd_c", "rsd_s", "tv")
CONFIGS = [
    *([f"drafter={d}"] for d in DRAFTERS),
    *([f"drafter={d}", "budget=fixed_compute", "budget.target_tokens=6"] for d in DRAFTERS),
    ["drafter=spectr", "drafter.num_sequences=2", "sampling.temperature=0.7", "sampling.top_k=5", "seed=3"],
    ["drafter=rsd_c", "budget=fixed_compute", "budget.target_tokens=10", "budget.max_depth=2", "budget.max_runs=4"],
    ["drafter=specinfer", "+drafter.verifier=traversal", "dataset.max_prompt_tokens=20", "num_threads=null"],
    ["drafter=sd", "dataset.num_prompts=3", "dataset.shuffle_seed=7", "sampling.temperature=0"],
    ["drafter=rsd_s", "model_pair=tiny_opt", "logger=wandb", "budget.draft_length=2"],
]


def run_dirs() -> dict:
    out = {}
    for overrides in CONFIGS:
        rc = resolve_config(compose_cfg("model_pair=tiny_llama", f"out_dir={OUT}", *overrides))
        plans = plan_runs(rc, run_inputs(rc, load_examples(rc.dataset)))
        out[" ".join(overrides)] = [{"run_dir": str(p.run_dir.relative_to(OUT)), "identity": p.identity}
                                    for p in plans]
    return out


if __name__ == "__main__":
    json.dump(run_dirs(), sys.stdout, indent=1)
    print()
