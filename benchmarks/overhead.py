"""Where a decoding step's time goes, per method and shape: ms per step split into target forward, draft forward,
drafting logic, verification, cache compaction and other (target inputs, laws, the loop), plus the share of the step
spent outside model forwards (the harness's overhead; target: <= 3% on the embedded pair, and on the tiny pair
<= 1 ms/step for SD and <= 2 ms/step for any tree).

    python benchmarks/overhead.py --pair tiny --prompts 2 --max-new-tokens 48
    python benchmarks/overhead.py --pair embedded --prompts 2 --max-new-tokens 48
"""

from __future__ import annotations

from common import COMPONENTS, SHAPES, command, machine, parser_and_prompts, profile_prompts

from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams


def main() -> None:
    args, pair, prompts, labels = parser_and_prompts(__doc__, **{"--temperature": {"type": float, "default": 1.0}})
    print(f"$ {command()}\n# {machine()}")
    print(f"# pair {args.pair} in {args.dtype}: {args.prompts} prompts x {args.max_new_tokens} tokens, "
          f"T={args.temperature:g}; "
          "ms per step (one target call)")
    head = f"{'method':<18} {'BE':>5} " + " ".join(f"{c:>10}" for c in COMPONENTS) + f" {'step':>8} {'outside':>8}"
    print(head + "\n" + "-" * len(head))
    for label in labels:
        drafter = SHAPES[label]()
        engine = Engine(pair.target, pair.draft if drafter.draft_length else None, drafter,
                        SamplingParams(args.temperature), pair.eos_token_ids, pair.vocab_size)
        prof = profile_prompts(engine, prompts, args.max_new_tokens)
        split = prof.split()
        print(f"{label:<18} {prof.tokens / prof.steps:>5.2f} " + " ".join(f"{split[c]:>10.3f}" for c in COMPONENTS)
              + f" {sum(split.values()):>8.3f} {100 * prof.overhead_share():>7.1f}%", flush=True)


if __name__ == "__main__":
    main()
