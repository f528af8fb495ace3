"""How close each method's token rate comes to what its model forwards alone allow:

    limit = BE / (t_target(B + 1) + L * t_draft(w)),   efficiency = measured token rate / limit  (goal >= 0.95)

t_target(n): one target forward scoring n tokens after the prompt; t_draft(w): one draft forward of a level of w
nodes (w = the tree's width: 1 for SD, K or W for the trees); both medians of standalone calls. The in-situ column
is the same ratio with the forward times measured inside the run (1 - the share of the step outside forwards).

    python benchmarks/limit.py --pair tiny --prompts 2 --max-new-tokens 48
"""

from __future__ import annotations

import time

import torch
from common import SHAPES, command, machine, parser_and_prompts, profile_prompts

from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams
from rsd.models.adapter import CausalLM


def forward_ms(lm: CausalLM, context: list[int], n: int, chain: bool, reps: int = 15) -> float:
    """Median seconds of one forward of n tree tokens after `context` is cached: with a full tree mask, or for a
    chain without one (plain causal attention, as the engine runs a chain)."""
    lm.reset()
    lm.forward(torch.tensor(context), torch.arange(len(context)), None, last=1)
    times = []
    for _ in range(reps):
        attend = None if chain else torch.ones(n, len(context) + n, dtype=torch.bool)
        start = time.perf_counter()
        lm.forward(torch.full((n,), context[-1]), torch.full((n,), len(context)), attend)
        times.append(time.perf_counter() - start)
        lm.compact(len(context), torch.zeros(0, dtype=torch.long))
    return sorted(times)[reps // 2]


def width(drafter) -> int:
    for attr in ("k", "width"):
        if hasattr(drafter, attr):
            return getattr(drafter, attr)
    return getattr(drafter, "branching", [1])[0]


def main() -> None:
    args, pair, prompts, labels = parser_and_prompts(__doc__)
    print(f"$ {command()}\n# {machine()}\n# pair {args.pair} in {args.dtype}, T=1, "
          f"{args.prompts} prompts x {args.max_new_tokens}")
    head = (f"{'method':<18} {'BE':>5} {'t_tgt(B+1)':>10} {'t_draft(w)':>10} {'limit/s':>8} {'measured/s':>10} "
            f"{'ratio':>6} {'in-situ':>7}")
    print(head + "\n" + "-" * len(head))
    context = prompts[0] + [prompts[0][-1]] * (args.max_new_tokens // 2)
    for label in labels:
        drafter = SHAPES[label]()
        engine = Engine(pair.target, pair.draft if drafter.draft_length else None, drafter, SamplingParams(1.0),
                        pair.eos_token_ids, pair.vocab_size)
        prof = profile_prompts(engine, prompts, args.max_new_tokens)
        be = prof.tokens / prof.steps
        chain = width(drafter) == 1
        t_target = forward_ms(pair.target, context, drafter.max_tree_size + 1, chain)
        t_draft = forward_ms(pair.draft, context, width(drafter), chain) if drafter.draft_length else 0.0
        limit = be / (t_target + drafter.draft_length * t_draft)
        rate = prof.tokens / prof.s["wall"]
        print(f"{label:<18} {be:>5.2f} {1e3 * t_target:>10.3f} {1e3 * t_draft:>10.3f} {limit:>8.1f} {rate:>10.1f} "
              f"{rate / limit:>6.2f} {1 - prof.overhead_share():>7.2f}", flush=True)
    pair.target.reset()
    if pair.draft is not None:
        pair.draft.reset()


if __name__ == "__main__":
    main()
