"""What recording the root optimum and root acceptance (docs/algorithms.md#optimum) costs per step, at B = 30.

For each method the same prompts are generated with recording on and off, interleaved prompt by prompt (the order
alternating), so load changes hit both alike; recording draws no randomness, so both runs make the same steps.
Columns, in ms per step: `timed`, the engine's step wall (`wall_s` per target call; recording and the expected yield
are outside it); `off` and `on`, the elapsed time per step with recording off and on; `record`, the recording's own
time (`Engine._record_root`, timed directly) and `share`, record / timed (goal: <= 5%). On a loaded machine wall
times jump whenever the process waits for a core, so the `cpu` columns repeat the share in this thread's CPU time:
the recording's, over the step's (the generation without recording, less its expected-yield calls).

    python benchmarks/optimum_cost.py --pair tiny --prompts 2 --max-new-tokens 48
    python benchmarks/optimum_cost.py --pair embedded --prompts 2 --max-new-tokens 32
"""

from __future__ import annotations

import time

from common import SHAPES, command, machine, parser_and_prompts

from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import BV, TV

B30 = {**{label: SHAPES[label] for label in
          ("sd L=30 (B=30)", "specinfer 6x5", "spectr 6x5", "rsd_c 6-1-1-1-1", "rsd_s 6x5")},
       "bv L=30": lambda: BV(30), "tv 6-1-1-1-1": lambda: TV([6, 1, 1, 1, 1])}


class Clocks:
    """Wall and thread-CPU seconds, accumulated by wrappers around the calls being measured."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall += time.perf_counter() - wall
                self.cpu += time.thread_time() - cpu

        return timed


def measure(engine: Engine, prompts: list[list[int]], max_new_tokens: int) -> dict[str, float]:
    """Interleaved on/off generations of every prompt: seconds (summed) and the step count of the 'on' runs."""
    record, off_yield, on_yield = Clocks(), Clocks(), Clocks()
    recorder, expected = engine._record_root, engine.verifier.expected_yield
    totals = dict.fromkeys(("timed", "on", "off", "off_cpu", "steps"), 0.0)
    try:
        for i, ids in enumerate(prompts):
            for mode in (("on", "off") if i % 2 == 0 else ("off", "on")):
                engine._record_root = record.wrap(recorder) if mode == "on" else (lambda step, out: None)
                engine.verifier.expected_yield = (on_yield if mode == "on" else off_yield).wrap(expected)
                wall, cpu = time.perf_counter(), time.thread_time()
                out = engine.generate(ids, max_new_tokens, prompt_generator(0, str(i)))
                totals[mode] += time.perf_counter() - wall
                if mode == "off":
                    totals["off_cpu"] += time.thread_time() - cpu
                else:
                    totals["timed"] += out.wall_s
                    totals["steps"] += out.target_calls
    finally:
        del engine._record_root, engine.verifier.expected_yield
    return {**totals, "record": record.wall, "record_cpu": record.cpu, "step_cpu": totals["off_cpu"] - off_yield.cpu}


def main() -> None:
    args, pair, prompts, _ = parser_and_prompts(__doc__, **{"--temperature": {"type": float, "default": 1.0}})
    labels = list(B30) if args.shapes == "all" else args.shapes.split(",")
    print(f"$ {command()}\n# {machine()}")
    print(f"# pair {args.pair} in {args.dtype}: {args.prompts} prompts x {args.max_new_tokens} tokens, "
          f"T={args.temperature:g}; "
          "ms per step, recording on/off interleaved")
    head = (f"{'method':<16} {'steps':>5} {'timed':>8} {'off':>8} {'on':>8} {'record':>8} {'share':>7} "
            f"{'cpu step':>9} {'cpu rec':>8} {'cpu share':>9}")
    print(head + "\n" + "-" * len(head))
    for label in labels:
        engine = Engine(pair.target, pair.draft, B30[label](), SamplingParams(args.temperature), pair.eos_token_ids,
                        pair.vocab_size)
        engine.warm_up(prompts[0])
        m = measure(engine, prompts, args.max_new_tokens)
        ms = {k: 1e3 * v / max(m["steps"], 1) for k, v in m.items()}
        print(f"{label:<16} {int(m['steps']):>5} {ms['timed']:>8.2f} {ms['off']:>8.2f} {ms['on']:>8.2f} "
              f"{ms['record']:>8.3f} {100 * m['record'] / m['timed']:>6.1f}% {ms['step_cpu']:>9.2f} "
              f"{ms['record_cpu']:>8.3f} {100 * m['record_cpu'] / m['step_cpu']:>8.1f}%", flush=True)


if __name__ == "__main__":
    main()
