"""Decode token rate of every method against AR on the built-in prompts, at T = 1 and T = 0, side by side.

Methods run interleaved prompt by prompt (AR, then each method, on the same prompt before the next), so a change in
machine load hits every method alike; the ratio is decode tokens / decode seconds summed over the prompts, over AR's.
The dtype is the pair's `auto` choice unless --dtype says otherwise (the line above the table names it).

    python benchmarks/speedup.py --pair embedded --prompts 4 --max-new-tokens 64
"""

from __future__ import annotations

import torch
from common import PAIRS, command, machine

from rsd.data import load_builtin
from rsd.drafters import AR, PLD, RSDC, RSDS, SD, SpecInfer, SpecTr
from rsd.engine import Engine
from rsd.models.hardware import resolve_dtype
from rsd.models.pairs import load_pair
from rsd.sampling import SamplingParams, prompt_generator

METHODS = {
    "ar": AR,
    "sd L=4": lambda: SD(4),
    "pld L=4": lambda: PLD(4),
    "specinfer 3x4": lambda: SpecInfer(3, 4),
    "spectr 3x4": lambda: SpecTr(3, 4),
    "rsd_c 3-1-1-1": lambda: RSDC([3, 1, 1, 1]),
    "rsd_s 3x4": lambda: RSDS(3, 4),
    "rsd_c 4-2-1 (B=14)": lambda: RSDC([4, 2, 1]),
    "rsd_s 2x7 (B=14)": lambda: RSDS(2, 7),
}
SETS = ("xsum_builtin", "wmt_builtin", "dolly_builtin")


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", choices=sorted(PAIRS), default="embedded")
    ap.add_argument("--dtype", default="auto", help="float32, bfloat16, or auto (this machine's fast dtype)")
    ap.add_argument("--prompts", type=int, default=4, help="per built-in set (three sets)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperatures", default="1,0")
    ap.add_argument("--methods", default="all", help="comma-separated labels of METHODS, or 'all'")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtype = resolve_dtype(args.dtype, "cpu")
    pair = load_pair({**PAIRS[args.pair], "dtype": dtype, "device": "cpu"})
    labels = list(METHODS) if args.methods == "all" else ["ar"] + [m for m in args.methods.split(",") if m != "ar"]
    prompts = [(f"{s}-{i}", pair.encode_prompt(ex.prompt)) for s in SETS for i, ex in
               enumerate(load_builtin(s)[: args.prompts])]
    print(f"$ {command()}\n# {machine()}\n# pair {args.pair} in {dtype}; {len(prompts)} prompts (three built-in "
          f"sets) x {args.max_new_tokens} new tokens; methods interleaved prompt by prompt")
    for temperature in (float(t) for t in args.temperatures.split(",")):
        params = SamplingParams(temperature)
        engines = {m: Engine(pair.target, pair.draft if METHODS[m]().uses_draft_model else None, METHODS[m](), params,
                             pair.eos_token_ids, pair.vocab_size) for m in labels}
        for engine in engines.values():
            engine.warm_up(prompts[0][1])
        tokens, seconds, steps, emitted = ({m: 0.0 for m in labels} for _ in range(4))
        for pid, ids in prompts:
            for m, engine in engines.items():
                out = engine.generate(ids, args.max_new_tokens, prompt_generator(0, pid))
                tokens[m] += out.decode_tokens
                seconds[m] += out.decode_s
                steps[m] += out.target_calls
                emitted[m] += len(out.new_token_ids)
        head = f"{'T=' + format(temperature, 'g'):<20} {'BE':>5} {'decode tok/s':>12} {'x AR':>6}"
        print("\n" + head + "\n" + "-" * len(head))
        ar_rate = tokens["ar"] / seconds["ar"]
        for m in labels:
            rate = tokens[m] / seconds[m]
            print(f"{m:<20} {emitted[m] / steps[m]:>5.2f} {rate:>12.1f} {rate / ar_rate:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
