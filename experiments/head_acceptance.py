"""Acceptance of the embedded feature head on the built-in evaluation prompts, per task style and draft position, in
the engine and teacher-forced on the same answers.

For each prompt, SD (L = 4) decodes at T = 1 on the feature-head pair; its output is a sample of the target. In the
engine: the exact position-1 acceptance sum_x min(p, q) of every step's root laws, and acc>=k, the fraction of steps
accepting at least k drafted tokens. Teacher-forced on the emitted answer: the head's unrolled draft steps 1..4 from
the target's true features (what training optimises), and sum_x min(p, q) against the target's full law at every
answer position. At the step roots, the engine's position-1 law and the teacher-forced step-1 law see the same
context, so their acceptances must agree (the printed max gap; a feature fed at the wrong position breaks it while
staying lossless). The built-in prompts are not in the teacher data.

    python experiments/head_acceptance.py --prompts 16 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.data import load_builtin
from rsd.drafters import SD
from rsd.harness.schema import ModelPairConfig
from rsd.models.embedded import cache_root
from rsd.models.feature_head.unrolled import unrolled_outputs
from rsd.models.pairs import load_pair

PAIR = {"name": "smollm2_eagle", "target": "embedded:smollm2-135m-instruct", "draft": "embedded:smollm2-eagle",
        "draft_kind": "feature_head", "chat": True, "dtype": "float32", "device": "cpu"}
SETS = ("xsum_builtin", "wmt_builtin", "dolly_builtin")
STEPS = 4


@torch.inference_mode()
def teacher_forced(pair, ids: list[int], answer_from: int) -> tuple[np.ndarray, np.ndarray]:
    """Per answer position j >= answer_from - 1 (predicting token j + 1) and draft step s = 1..STEPS, the acceptance
    sum_x min(p_s, q) of the head's step-s law at j against the target's law q at j: [positions, STEPS] (nan where a
    step's chain root would lie before answer_from - 1), and the positions."""
    model, head = pair.target.model, pair.draft
    x = torch.tensor(ids)
    out = model.model(input_ids=x[None])
    feats = out.last_hidden_state[0]
    q = torch.softmax(model.lm_head(feats).float(), -1)
    batch = {"ids": x, "positions": torch.arange(len(x)), "seq": torch.zeros(len(x), dtype=torch.long),
             "prev": torch.cat([torch.zeros_like(feats[:1]), feats[:-1]])}
    rows = np.arange(answer_from - 1, len(x) - 1)
    acc = np.full((len(rows), STEPS), np.nan)
    for s, h in enumerate(unrolled_outputs(head.head, head.embed, batch, STEPS)):
        p = torch.softmax(head.logits(h).float(), -1)
        a = torch.minimum(p, q).sum(-1).numpy()
        ok = rows - s >= answer_from - 1  # the chain's root (s positions back) is the prompt's last token or later
        acc[ok, s] = a[rows[ok]]
    return acc, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=16, help="evaluation prompts per built-in set (the first ones)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft", default="embedded:smollm2-eagle", help="the head (a registered name or a directory)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    pair = load_pair(ModelPairConfig.from_dict({**PAIR, "draft": args.draft}))
    engine = Engine(pair.target, pair.draft, SD(STEPS), SamplingParams(1.0), pair.eos_token_ids, pair.vocab_size)
    steps_of_prompt, engine_step = [], engine.step

    def recorded(*a, **k):  # keep each step's tree and target laws
        steps_of_prompt.append(engine_step(*a, **k))
        return steps_of_prompt[-1]

    engine.step = recorded
    print(f"# head {args.draft}; {args.prompts} prompts per set x {args.max_new_tokens} new tokens, T = 1, SD L = "
          f"{STEPS}, float32, one thread; cache {cache_root()}")
    head = (f"{'set':<14} {'TF pos 1':>8} {'pos 2':>6} {'pos 3':>6} {'pos 4':>6} | {'engine root':>11} "
            + " ".join(f"acc>={k + 1}" for k in range(STEPS)) + f" | {'max |gap|':>9}")
    print(head + "\n" + "-" * len(head))
    totals = {"tf": [], "root": [], "reach": np.zeros(STEPS), "steps": 0}
    t0 = time.process_time()
    for name in SETS:
        tf_rows, roots, reach, steps, gap = [], [], np.zeros(STEPS), 0, 0.0
        for i, ex in enumerate(load_builtin(name)[: args.prompts]):
            ids = pair.encode_prompt(ex.prompt)
            steps_of_prompt.clear()
            out = engine.generate(ids, args.max_new_tokens, prompt_generator(0, f"{name}-{i}"))
            acc, rows = teacher_forced(pair, ids + out.new_token_ids, len(ids))
            tf_rows.append(acc)
            # a step's root sits at position len(ids) - 1 + the tokens emitted before it (row `before` of acc)
            before = 0
            for step in steps_of_prompt:
                if 0 in step.tree.draft_probs:
                    root = float(torch.minimum(step.tree.draft_probs[0], step.q[0]).sum())
                    roots.append(root)
                    gap = max(gap, abs(root - acc[before, 0]))
                before += len(step.emitted)
            for a in out.accepted_lengths:
                reach[: min(a, STEPS)] += 1
            steps += len(out.accepted_lengths)
        tf = np.nanmean(np.concatenate(tf_rows), 0)
        print(f"{name:<14} {tf[0]:>8.3f} {tf[1]:>6.3f} {tf[2]:>6.3f} {tf[3]:>6.3f} | {np.mean(roots):>11.3f} "
              + " ".join(f"{r / steps:>6.3f}" for r in reach) + f" | {gap:>9.1e}", flush=True)
        totals["tf"] += tf_rows
        totals["root"] += roots
        totals["reach"] += reach
        totals["steps"] += steps
    tf = np.nanmean(np.concatenate(totals["tf"]), 0)
    print(f"{'all':<14} {tf[0]:>8.3f} {tf[1]:>6.3f} {tf[2]:>6.3f} {tf[3]:>6.3f} | {np.mean(totals['root']):>11.3f} "
          + " ".join(f"{r / totals['steps']:>6.3f}" for r in totals["reach"]))
    print(f"# TF: teacher-forced, token-weighted over answer positions; engine root: mean over steps; "
          f"{(time.process_time() - t0) / 60:.1f} CPU-min")


if __name__ == "__main__":
    main()
