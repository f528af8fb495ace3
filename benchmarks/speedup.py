"""Decode token rate of every method against AR on the built-in prompts, at T = 1 and T = 0, side by side.

Methods run interleaved prompt by prompt (AR, then each method, on the same prompt before the next), so a change in
machine load hits every method alike. Columns: tokens per call (BE), the decode rate (decode tokens / decode seconds
summed over the prompts) and its ratio to AR's, the geometric mean of the per-prompt ratios to AR with its paired 95%
CI and p-value (a t-test on log ratios), and acc>=k, the fraction of steps that accept at least k drafted tokens
(vLLM's num_accepted_tokens_per_pos / drafts, token-weighted over all steps). `--reference PAIR` adds the same
drafted methods on another pair's draft (the same target), e.g. the v3 draft beside the feature head.
The dtype is the pair's `auto` choice unless --dtype says otherwise (the line above the table names it).

    python benchmarks/speedup.py --pair embedded-eagle --reference embedded --prompts 4 --max-new-tokens 64
"""

from __future__ import annotations

import math

import numpy as np
import torch
from common import PAIRS, command, machine

from analysis.stats import paired
from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.data import load_builtin
from rsd.drafters import AR, PLD, RSDC, RSDS, SD, Eagle2, SpecInfer, SpecTr
from rsd.harness.schema import ModelPairConfig
from rsd.models.hardware import resolve_dtype
from rsd.models.pairs import load_pair

METHODS = {
    "ar": AR,
    "sd L=4": lambda: SD(4),
    "pld L=4": lambda: PLD(4),
    "pld L=5": lambda: PLD(5),
    "specinfer 3x4": lambda: SpecInfer(3, 4),
    "spectr 3x4": lambda: SpecTr(3, 4),
    "rsd_c 3-1-1-1": lambda: RSDC([3, 1, 1, 1]),
    "rsd_s 3x4": lambda: RSDS(3, 4),
    "eagle2 k3xL4xN12": lambda: Eagle2(3, 4, 12),
    "rsd_c 4-2-1 (B=14)": lambda: RSDC([4, 2, 1]),
    "rsd_s 2x7 (B=14)": lambda: RSDS(2, 7),
    "eagle2 k2xL7xN14 (B=14)": lambda: Eagle2(2, 7, 14),
}
POSITIONS = 4  # acc>=1 .. acc>=4
SETS = ("xsum_builtin", "wmt_builtin", "dolly_builtin")


def ratio_cell(rates: list[float], ar_rates: list[float]) -> str:
    """'1.23 (1.10, 1.37) p=0.001': the geometric mean of per-prompt rate ratios with its paired 95% CI."""
    test = paired(np.log(rates), np.log(ar_rates))
    return f"{math.exp(test.mean):.2f} ({math.exp(test.low):.2f}, {math.exp(test.high):.2f}) p={test.p:.2g}"


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", choices=sorted(PAIRS), default="embedded")
    ap.add_argument("--reference", choices=sorted(PAIRS), help="also run the drafted methods on this pair's draft")
    ap.add_argument("--dtype", default="auto", help="float32, bfloat16, or auto (this machine's fast dtype)")
    ap.add_argument("--prompts", type=int, default=4, help="per built-in set")
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated built-in sets (default: all three)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperatures", default="1,0")
    ap.add_argument("--methods", default="all", help="comma-separated labels of METHODS, or 'all'")
    args = ap.parse_args(argv)
    if args.reference and PAIRS[args.reference]["target"] != PAIRS[args.pair]["target"]:
        ap.error(f"--reference {args.reference} has another target than --pair {args.pair}: rates are comparable only "
                 "on the same target")
    sets = args.sets.split(",")
    unknown = sorted(set(sets) - set(SETS))
    if unknown:
        ap.error(f"--sets {','.join(unknown)}: unknown; the built-in sets are {', '.join(SETS)}")
    torch.set_num_threads(1)
    dtype = resolve_dtype(args.dtype, "cpu")
    pairs = {name: load_pair(ModelPairConfig.from_dict({**PAIRS[name], "dtype": dtype, "device": "cpu"}))
             for name in [args.pair] + ([args.reference] if args.reference else [])}
    pair = pairs[args.pair]
    labels = list(METHODS) if args.methods == "all" else ["ar"] + [m for m in args.methods.split(",") if m != "ar"]
    rows = [(args.pair, m) for m in labels] + [(args.reference, m) for m in labels
                                               if args.reference and METHODS[m]().uses_draft_model]
    prompts = [(f"{s}-{i}", pair.encode_prompt(ex.prompt)) for s in sets for i, ex in
               enumerate(load_builtin(s)[: args.prompts])]
    print(f"$ {command()}\n# {machine()}\n# pair {args.pair}" + (f" (rows 'ref': {args.reference}'s draft)"
                                                                 if args.reference else "")
          + f" in {dtype}; {len(prompts)} prompts ({', '.join(sets)}) x {args.max_new_tokens} new tokens; "
          "methods interleaved prompt by prompt")
    for temperature in (float(t) for t in args.temperatures.split(",")):
        params = SamplingParams(temperature)
        engines = {}
        for key, m in rows:
            drafter, p = METHODS[m](), pairs[key]
            engines[(key, m)] = Engine(p.target, p.draft if drafter.uses_draft_model else None, drafter, params,
                                       p.eos_token_ids, p.vocab_size)
        for engine in engines.values():
            engine.warm_up(prompts[0][1])
        rates = {r: [] for r in rows}
        tokens, seconds, steps, emitted = ({r: 0.0 for r in rows} for _ in range(4))
        reach = {r: [0] * POSITIONS for r in rows}
        for pid, ids in prompts:
            for r, engine in engines.items():
                out = engine.generate(ids, args.max_new_tokens, prompt_generator(0, pid))
                tokens[r] += out.decode_tokens
                seconds[r] += out.decode_s
                steps[r] += out.target_calls
                emitted[r] += len(out.new_token_ids)
                rates[r].append(out.decode_tokens / out.decode_s)
                for a in out.accepted_lengths:
                    for k in range(min(a, POSITIONS)):
                        reach[r][k] += 1
        head = (f"{'T=' + format(temperature, 'g'):<28} {'BE':>5} {'decode tok/s':>12} {'x AR':>6}  "
                f"{'per-prompt x AR (95% CI)':<30} " + " ".join(f"acc>={k + 1:<2}" for k in range(POSITIONS)))
        print("\n" + head + "\n" + "-" * len(head))
        ar = (args.pair, "ar")
        ar_rate = tokens[ar] / seconds[ar]
        for r in rows:
            rate = tokens[r] / seconds[r]
            label = r[1] if r[0] == args.pair else f"ref {r[1]}"
            cell = ratio_cell(rates[r], rates[ar]) if r != ar else ""
            accs = " ".join(f"{n / steps[r]:>6.2f}" for n in reach[r])
            print(f"{label:<28} {emitted[r] / steps[r]:>5.2f} {rate:>12.1f} {rate / ar_rate:>6.2f}  {cell:<30} {accs}",
                  flush=True)


if __name__ == "__main__":
    main()
