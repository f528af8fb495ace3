"""Does a static-shape forward under torch.compile pay on this machine? Eager `CausalLM.forward` against
`CausalLM(model, static="buffers")` (fixed shapes, uncompiled) and `static="compile"` (model_pair.static_forward).

The static path (rsd/models/adapter.py): a KV buffer of fixed capacity per layer written in place at slot indices,
queries padded to a power of two (`pad`; padding rows attend to their own slot only and no real row sees them),
mask and positions built at that fixed shape. Each row reports the median ms per call after a 256-token context
(paths interleaved call by call, so load hits them alike), the compile time of the first compiled call (paid once per
shape and model), and the largest |logit difference| to eager.

    python benchmarks/static_compile.py --quick      # embedded pair, q = 1 only (~4 minutes with a cold cache)
    python benchmarks/static_compile.py --greedy     # float32 greedy decodes through model_pair.static_forward=compile

`--greedy` decodes a few prompts x 32 tokens at T = 0 with AR, SD L=4 and SpecTr 3x4 on each pair in float32, eager
and with `model_pair.static_forward=compile`, and reports whether the tokens are equal and each decode's wall time
(the compiled one's includes its compiles).
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from dataclasses import dataclass

import torch
from common import PAIRS, command, machine

from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.data import load_builtin
from rsd.drafters import AR, SD, SpecTr
from rsd.harness.schema import ModelPairConfig
from rsd.models.adapter import PAD_QS, CausalLM
from rsd.models.pairs import load_pair

CONTEXT = 256
NEW_TOKENS = 32
SD_Q, TREE_Q = 5, 14  # a target call of SD L=4 and of a B = 13 tree (plus the root)
PATHS = {"eager": "off", "static": "buffers", "compiled": "compile"}
SHORT_S = 0.005
TINY = {arch: {**PAIRS["tiny"], "name": f"tiny_{arch}", "target": f"tiny:{arch}", "draft": f"tiny:{arch}"}
        for arch in ("llama", "opt")}


@dataclass
class Case:
    pair: str
    role: str
    model: torch.nn.Module
    dtype: str
    qs: tuple[int, ...]  # tokens per call


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def max_diff(logits: torch.Tensor, ref: torch.Tensor) -> float:
    """max |logits - ref| over finite entries (a trimmed head's -inf must match exactly; inf if it does not)."""
    finite = torch.isfinite(ref)
    if not torch.equal(finite, torch.isfinite(logits)):
        return float("inf")
    return (logits.float() - ref)[finite].abs().max().item()


def tree_attend(q: int) -> torch.Tensor:
    """A causal block of q queries after the context (a chain: as costly per call as any tree of q nodes)."""
    return torch.cat([torch.ones(q, CONTEXT, dtype=torch.bool), torch.ones(q, q, dtype=torch.bool).tril()], 1)


def padded(q: int) -> int:
    return next((p for p in PAD_QS if p >= q), q)


def measure(case: Case, reps: int) -> list[dict]:
    """One row per q: eager / static / compiled ms (interleaved; 10x `reps` for forwards under 5 ms), compile s of
    the first compiled call, max |diff| to eager."""
    prompt = torch.arange(CONTEXT) % 200 + 10
    lms = {name: CausalLM(case.model, static) for name, static in PATHS.items()}
    none = torch.zeros(0, dtype=torch.long)
    rows = []
    with torch.inference_mode():
        for lm in lms.values():
            lm.reset()
            lm.forward(prompt, torch.arange(CONTEXT), None, last=1)
        for q in case.qs:
            tokens, positions, attend = torch.arange(q) + 11, torch.arange(CONTEXT, CONTEXT + q), tree_attend(q)
            times: dict[str, list[float]] = {name: [] for name in lms}
            logits = {}
            for name, lm in lms.items():  # the first call: compiles, and gives the logits compared
                start = time.perf_counter()
                logits[name] = lm.forward(tokens, positions, attend)
                times[name].append(time.perf_counter() - start)
                lm.compact(CONTEXT, none)
            compile_s, short = times["compiled"].pop(), times["eager"].pop() < SHORT_S
            times["static"].clear()
            for _ in range(reps * (10 if short else 1)):  # sub-ms forwards need many more samples under load
                for name, lm in lms.items():
                    start = time.perf_counter()
                    lm.forward(tokens, positions, attend)
                    times[name].append(time.perf_counter() - start)
                    lm.compact(CONTEXT, none)  # back to the context, untimed
            rows.append({"pair": case.pair, "role": case.role, "model": f"{case.pair} {case.role}",
                         "dtype": case.dtype, "q": q, "pad": padded(q), "compile_s": compile_s,
                         "ms": {name: 1e3 * median(t) for name, t in times.items()},
                         "ratio": median([e / c for e, c in zip(times["eager"], times["compiled"])]),
                         "diff": {name: max_diff(logits[name], logits["eager"].float()) for name in ("static",
                                                                                                     "compiled")}})
    return rows


def cases(pairs: list[str], tree: tuple[int, ...]) -> list[Case]:
    """The models to measure: embedded target (bf16, at the q of `tree`) and draft (bf16, f32, q = 1); tiny Llama and
    OPT targets and drafts (float32)."""
    out = []
    if "embedded" in pairs:
        pair = load_pair(ModelPairConfig.from_dict({**PAIRS["embedded"], "dtype": "float32", "device": "cpu"}))
        out.append(Case("embedded", "target", copy.deepcopy(pair.target.model).to(torch.bfloat16), "bfloat16", tree))
        out.append(Case("embedded", "draft", copy.deepcopy(pair.draft.model).to(torch.bfloat16), "bfloat16", (1,)))
        out.append(Case("embedded", "draft", pair.draft.model, "float32", (1,)))
    for arch in ("llama", "opt"):
        if f"tiny-{arch}" in pairs:
            pair = load_pair(ModelPairConfig.from_dict({**TINY[arch], "device": "cpu"}))
            out.append(Case(f"tiny {arch}", "target", pair.target.model, "float32", tree))
            out.append(Case(f"tiny {arch}", "draft", pair.draft.model, "float32", (1,)))
    return out


def print_rows(rows: list[dict]) -> None:
    print(f"# load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    head = (f"{'model':<18} {'dtype':<9} {'q':>2} {'pad':>3} {'eager':>8} {'static':>8} {'compiled':>8} "
            f"{'x eager':>7} {'compile s':>9} {'diff static':>11} {'diff comp':>9}")
    print(head + "\n" + "-" * len(head))
    for r in rows:
        ms = r["ms"]
        print(f"{r['model']:<18} {r['dtype']:<9} {r['q']:>2} {r['pad']:>3} {ms['eager']:>8.2f} {ms['static']:>8.2f} "
              f"{ms['compiled']:>8.2f} {r['ratio']:>7.2f} {r['compile_s']:>9.1f} "
              f"{r['diff']['static']:>11.2e} {r['diff']['compiled']:>9.2e}", flush=True)


def sd_step(rows: list[dict]) -> list[str]:
    """Per pair and dtype: the forwards of one SD L = 4 step (a target call of 5 tokens and 4 draft calls of 1),
    eager vs compiled, from the rows measured."""
    lines = []
    for pair, dtype in sorted({(r["pair"], r["dtype"]) for r in rows}):
        t = [r["ms"] for r in rows if (r["pair"], r["dtype"], r["role"], r["q"]) == (pair, dtype, "target", SD_Q)]
        d = [r["ms"] for r in rows if (r["pair"], r["dtype"], r["role"], r["q"]) == (pair, dtype, "draft", 1)]
        if t and d:
            eager, fast = (t[0][name] + 4 * d[0][name] for name in ("eager", "compiled"))
            lines.append(f"# SD L=4 step forwards, {pair} {dtype}: eager {eager:.1f} ms, compiled {fast:.1f} ms "
                         f"(x eager {eager / fast:.2f})")
    return lines


def greedy_check(pair_name: str, prompts: int, new_tokens: int) -> list[str]:
    """Per method: whether float32 greedy tokens through the compiled static path equal eager's, and both walls."""
    cfg = {**(PAIRS["embedded"] if pair_name == "embedded" else TINY[pair_name.split("-")[1]]), "dtype": "float32",
           "device": "cpu"}
    lines = []
    for label, drafter in (("ar", AR), ("sd L=4", lambda: SD(4)), ("spectr 3x4", lambda: SpecTr(3, 4))):
        tokens, walls = [], []
        for static in (None, "compile"):
            pair = load_pair(ModelPairConfig.from_dict({**cfg, "static_forward": static}))
            ids = [pair.encode_prompt(ex.prompt)[:200] for ex in load_builtin("dolly_builtin")[:prompts]]
            draft = pair.draft if label != "ar" else None
            engine = Engine(pair.target, draft, drafter(), SamplingParams(0.0), pair.eos_token_ids, pair.vocab_size)
            start = time.perf_counter()
            tokens.append([engine.generate(p, new_tokens, prompt_generator(0, str(i))).new_token_ids
                           for i, p in enumerate(ids)])
            walls.append(time.perf_counter() - start)
        lines.append(f"{pair_name:<10} {label:<11} {'equal' if tokens[0] == tokens[1] else 'DIFFERENT':>9} "
                     f"{walls[0]:>8.1f} {walls[1]:>10.1f}")
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default=None, help="of embedded,tiny-llama,tiny-opt (default: all; --quick: embedded)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--cold", action="store_true",
                    help="compile into a fresh inductor cache (what a first run pays; default: the shared cache)")
    ap.add_argument("--greedy", action="store_true", help="the greedy equality check instead of the timings")
    ap.add_argument("--prompts", type=int, default=2, help="--greedy: prompts per pair")
    ap.add_argument("--quick", action="store_true",
                    help="embedded pair, target at q = 1 only, 7 repetitions (~4 minutes with a cold cache)")
    args = ap.parse_args(argv)
    reps = 7 if args.quick else args.reps
    torch.set_num_threads(1)
    if args.cold:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="static_compile_")
    print(f"$ {command()}\n# {machine()}\n# {CONTEXT}-token context; ms per call (median of {reps}, paths "
          "interleaved); x eager = median of eager / compiled over paired calls; diff = max |logit - eager logit|; "
          f"compile s with {'a fresh' if args.cold else 'the shared'} inductor cache")
    pairs = args.pairs or ("embedded" if args.quick else "embedded,tiny-llama,tiny-opt")
    if args.greedy:
        print(f"# load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; float32, T = 0, {args.prompts} "
              f"prompts x {NEW_TOKENS} tokens\n{'pair':<10} {'method':<11} {'tokens':>9} {'eager s':>8} "
              f"{'compiled s':>10}")
        for name in pairs.split(","):
            greedy_check(name, args.prompts, NEW_TOKENS)
        return []
    rows = []
    tree = (1,) if args.quick else (1, SD_Q, TREE_Q)
    for case in cases(pairs.split(","), tree):
        case_rows = measure(case, reps)
        print_rows(case_rows)
        rows += case_rows
    print("\n".join(sd_step(rows)))
    return rows


if __name__ == "__main__":
    main()
