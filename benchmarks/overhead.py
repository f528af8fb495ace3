"""Where a decoding step's time goes, per method and shape: ms per step split into target forward, draft forward,
drafting logic, verification, cache compaction and other (target inputs, laws, the loop), plus the share of the step
spent outside model forwards (the harness's overhead; target: <= 3% on the embedded pair, and on the tiny pair
<= 1 ms/step for SD and <= 2 ms/step for any tree).

    python benchmarks/overhead.py --pair tiny --prompts 2 --max-new-tokens 48
    python benchmarks/overhead.py --pair embedded --prompts 2 --max-new-tokens 48
"""

from __future__ import annotations

import argparse

import torch
from common import COMPONENTS, PAIRS, SHAPES, command, machine, profiled

from rsd.data import load_builtin
from rsd.engine import Engine
from rsd.models.pairs import load_pair
from rsd.sampling import SamplingParams, prompt_generator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", choices=sorted(PAIRS), default="tiny")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shapes", default="all", help="comma-separated labels from common.SHAPES, or 'all'")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(PAIRS[args.pair])
    prompts = [pair.encode_prompt(ex.prompt)[:200] for ex in load_builtin("dolly_builtin")[: args.prompts]]
    labels = list(SHAPES) if args.shapes == "all" else args.shapes.split(",")
    print(f"$ {command()}\n# {machine()}")
    print(f"# pair {args.pair}: {args.prompts} prompts x {args.max_new_tokens} tokens, T={args.temperature:g}; "
          "ms per step (one target call)")
    head = f"{'method':<18} {'BE':>5} " + " ".join(f"{c:>10}" for c in COMPONENTS) + f" {'step':>8} {'outside':>8}"
    print(head + "\n" + "-" * len(head))
    for label in labels:
        drafter = SHAPES[label]()
        engine = Engine(pair.target, pair.draft if drafter.draft_length else None, drafter,
                        SamplingParams(args.temperature), pair.eos_token_ids, pair.vocab_size)
        if hasattr(engine, "warm_up"):
            engine.warm_up(prompts[0])
        else:
            engine.generate(prompts[0], 8, prompt_generator(99, "warm-up"))
        with profiled(engine) as prof:
            for i, ids in enumerate(prompts):
                out = engine.generate(ids, args.max_new_tokens, prompt_generator(0, str(i)))
                prof.steps += out.target_calls
                prof.tokens += len(out.new_token_ids)
                prof.s["wall"] += out.wall_s
        split = prof.split()
        print(f"{label:<18} {prof.tokens / prof.steps:>5.2f} " + " ".join(f"{split[c]:>10.3f}" for c in COMPONENTS)
              + f" {sum(split.values()):>8.3f} {100 * prof.overhead_share():>7.1f}%", flush=True)


if __name__ == "__main__":
    main()
