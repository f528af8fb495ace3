"""The shared-context pass of the third study: every method's exact expected yield at the same contexts.

For each prompt, the reference is the target's own sample (the AR run's output: same seed, same generator), and
`Engine.replay` drafts and verifies one step at every prefix of it, then commits the reference's next token instead
of the step's (docs/algorithms.md#shared-contexts). Methods then differ only by their drafts, not by where their
own samples took them, so paired differences lose the context-to-context spread; drafts and the verifier draw from
two generators, so methods that draft alike (SpecInfer and SpecTr) verify the very same trees. One JSON line per
prompt (fsync'd; a rerun skips recorded prompts) in OUT/<dataset>/T<temperature>/L<L>/<method>.jsonl:

    python experiments/shared_contexts.py --dataset dolly_builtin --lengths 2 3 --methods sd spectr rsd_c rsd_s
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from rsd.core.engine import Engine
from rsd.core.sampling import prompt_generator
from rsd.data import load_examples
from rsd.harness.config import RunConfig, resolve_config
from rsd.harness.files import append_record
from rsd.harness.runner import prompts_for
from rsd.harness.runs import plan_runs
from rsd.models.pairs import load_pair

CONF = Path(__file__).resolve().parents[1] / "conf"
PAPER_METHODS = ("sd", "specinfer", "spectr", "rsd_c", "rsd_s")


def run_config(experiment: str, dataset: str, method: str, length: int, prompts: int, temperature: float
               ) -> RunConfig:
    """The study's resolved config for one method at draft length `length` (its single shape)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={experiment}", f"dataset={dataset}", f"drafter={method}",
                                           f"budget.draft_length={length}", f"dataset.num_prompts={prompts}",
                                           f"sampling.temperature={temperature}"])
    return resolve_config(cfg)


def recorded(path: Path) -> set[str]:
    """Prompt ids with a complete line in `path` (a line cut short by a crash is ignored and decoded again)."""
    if not path.exists():
        return set()
    done = set()
    for line in path.read_text().splitlines():
        try:
            done.add(json.loads(line)["prompt_id"])
        except (json.JSONDecodeError, KeyError):
            continue
    return done


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="study_eagle_fixed_length")
    ap.add_argument("--dataset", default="dolly_builtin")
    ap.add_argument("--lengths", type=int, nargs="+", default=[2, 3, 4, 5])
    ap.add_argument("--methods", nargs="+", default=list(PAPER_METHODS))
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=Path("results/study/embedded-eagle-shared"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    base = run_config(args.experiment, args.dataset, "ar", args.lengths[0], args.prompts, args.temperature)
    prompts, _ = prompts_for(base, load_examples(base.dataset))
    pair = load_pair(base.model_pair, need_draft=True)
    ar = Engine(pair.target, None, plan_runs(base)[0].make_drafter(), base.sampling.params, pair.eos_token_ids,
                pair.vocab_size)
    references = {ex.id: ar.generate(ids, base.sampling.max_new_tokens, prompt_generator(base.seed, ex.id)
                                     ).new_token_ids for ex, ids in prompts}
    for length in args.lengths:
        for method in args.methods:
            rc = run_config(args.experiment, args.dataset, method, length, args.prompts, args.temperature)
            (plan,) = plan_runs(rc)
            drafter = plan.make_drafter()
            engine = Engine(pair.target, pair.draft, drafter, rc.sampling.params, pair.eos_token_ids,
                            pair.vocab_size)
            path = args.out / args.dataset / f"T{args.temperature:g}" / f"L{length}" / f"{method}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            done = recorded(path)
            todo = [(ex, ids) for ex, ids in prompts if ex.id not in done]
            started = time.perf_counter()
            for ex, ids in todo:
                out = engine.replay(ids, references[ex.id], prompt_generator(rc.seed, f"{ex.id}:draws"),
                                    prompt_generator(rc.seed, f"{ex.id}:coins"))
                append_record(path, {"prompt_id": ex.id, "method": method, "shape": plan.shape, "seed": rc.seed,
                                     "reference": out.new_token_ids, "expected_emitted": out.expected_emitted,
                                     "accepted_lengths": out.accepted_lengths,
                                     "root_acceptance": out.root_acceptance, "wall_s": out.wall_s})
                print(f"[shared] {args.dataset} T={args.temperature:g} L={length} {method}: prompt {ex.id}, mean "
                      f"expected yield {sum(out.expected_emitted) / len(out.expected_emitted):.2f} over "
                      f"{len(out.expected_emitted)} contexts", file=sys.stderr, flush=True)
            print(f"[shared] {args.dataset} T={args.temperature:g} L={length} {method}: {len(todo)} prompts decoded "
                  f"({len(done)} recorded before) in {time.perf_counter() - started:.0f} s", file=sys.stderr,
                  flush=True)


if __name__ == "__main__":
    main()
