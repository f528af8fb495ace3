"""Does a static-shape forward under torch.compile pay on this machine? Eager `CausalLM.forward` against a static path.

The static path: a KV buffer of the run's maximum length per layer, written in place at slot indices; token ids,
positions, slots and the additive attention mask are fixed-size buffers refilled before each call; a tree of q real
queries is padded to a fixed q (pad rows attend to their own slot only, and their slots lie past the real ones, so
no real row sees them). It runs uncompiled ("static") and under `torch.compile(dynamic=False)` per mode. Each row
reports the median ms per call after a 256-token context (paths interleaved call by call, so load hits them alike),
the compile time of the first compiled call (paid once per shape), and the largest |logit difference| to eager.

    python benchmarks/static_compile.py --quick      # default compile mode only, fewer repetitions
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from common import PAIRS, command, machine
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from rsd.models.adapter import CausalLM
from rsd.models.pairs import load_pair

CONTEXT = 256
NEW_TOKENS = 32  # the run's maximum length is CONTEXT + NEW_TOKENS + the padded q
TREE = 14  # the target's tree queries are padded to B = 14 (the draft's chain step is q = 1)
SHORT_S = 0.005
TINY = {arch: {**PAIRS["tiny"], "name": f"tiny_{arch}", "target": f"tiny:{arch}", "draft": f"tiny:{arch}"}
        for arch in ("llama", "opt")}


class SlotLayer(DynamicLayer):
    """One layer's fixed-size KV buffer: a forward writes its entries at `owner.slots` and attends over the whole
    buffer (the mask hides unwritten and stale slots)."""

    def __init__(self, owner: StaticForward) -> None:
        super().__init__()
        self.owner = owner

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            shape = (*key_states.shape[:-2], self.owner.max_len, key_states.shape[-1])
            self.keys, self.values = key_states.new_zeros(shape), value_states.new_zeros(shape)
        self.keys.index_copy_(2, self.owner.slots, key_states)
        self.values.index_copy_(2, self.owner.slots, value_states)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.owner.max_len


class StaticForward:
    """A model's forward over fixed shapes: q queries (real ones first, then padding) against max_len KV slots."""

    def __init__(self, model: torch.nn.Module, max_len: int, q: int, mode: str | None) -> None:
        dev, dtype = next(model.parameters()).device, next(model.parameters()).dtype
        self.model, self.max_len, self.q = model, max_len, q
        self.neg = torch.finfo(dtype).min
        self.ids = torch.zeros((1, q), dtype=torch.long, device=dev)
        self.pos = torch.zeros((1, q), dtype=torch.long, device=dev)
        self.slots = torch.zeros(q, dtype=torch.long, device=dev)
        self.mask = torch.full((1, 1, q, max_len), self.neg, dtype=dtype, device=dev)
        self.cache = DynamicCache(config=model.config)
        self.cache.layers = [SlotLayer(self) for _ in self.cache.layers]
        self.fn = self._call if mode is None else torch.compile(self._call, dynamic=False, mode=mode)

    def _call(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, position_ids=pos, attention_mask=mask, cache=self.cache,
                          use_cache=True).logits

    def prefill(self, tokens: torch.Tensor) -> None:
        """Write a causal prompt into slots [0, len) with an uncompiled forward of its own shape."""
        n = len(tokens)
        saved, self.slots = self.slots, torch.arange(n, device=self.slots.device)
        mask = torch.full((1, 1, n, self.max_len), self.neg, dtype=self.mask.dtype, device=self.mask.device)
        mask[0, 0, :, :n] = torch.where(torch.ones(n, n, dtype=torch.bool).tril(), 0.0, self.neg)
        try:
            self._call(tokens[None], self.slots[None], mask)
        finally:
            self.slots = saved

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor, cached: int
                 ) -> torch.Tensor:
        """Logits [k, V] of k <= q real queries at `positions`, `attend` [k, cached + k] as in CausalLM.forward."""
        k = len(tokens)
        self.ids.zero_()
        self.ids[0, :k] = tokens
        self.pos.fill_(int(positions[-1]))
        self.pos[0, :k] = positions
        torch.arange(cached, cached + self.q, out=self.slots)
        self.mask.fill_(self.neg)
        self.mask[0, 0, :k, : cached + k] = torch.where(attend, 0.0, self.neg)
        pad = torch.arange(k, self.q)
        self.mask[0, 0, pad, cached + pad] = 0.0
        return self.fn(self.ids, self.pos, self.mask)[0, :k]


@dataclass
class Case:
    label: str
    model: torch.nn.Module
    dtype: str
    qs: tuple[tuple[int, int], ...]  # (real q, padded q)


def median_ms(times: list[float]) -> float:
    return 1e3 * sorted(times)[len(times) // 2]


def max_diff(logits: torch.Tensor, ref: torch.Tensor) -> float:
    """max |logits - ref| over finite entries (a trimmed head's -inf must match exactly; inf if it does not)."""
    finite = torch.isfinite(ref)
    if not torch.equal(finite, torch.isfinite(logits)):
        return float("inf")
    return (logits.float() - ref)[finite].abs().max().item()


def tree_attend(q: int, cached: int) -> torch.Tensor:
    """A causal block of q queries after `cached` tokens (a chain: as costly per call as any tree of q nodes)."""
    return torch.cat([torch.ones(q, cached, dtype=torch.bool), torch.ones(q, q, dtype=torch.bool).tril()], 1)


def measure(case: Case, modes: list[str], reps: int) -> list[dict]:
    """One row per (real q, padded q): eager / static / compiled ms (interleaved; 10x `reps` for forwards under 5 ms),
    compile s, max |diff|."""
    prompt = torch.arange(CONTEXT) % 200 + 10
    eager = CausalLM(case.model)
    paths: dict[tuple[int, str], StaticForward] = {}
    compile_s: dict[tuple[int, str], float] = {}
    rows = []
    for k, q in case.qs:
        tokens, positions = torch.arange(k) + 11, torch.arange(CONTEXT, CONTEXT + k)
        attend = tree_attend(k, CONTEXT)
        with torch.inference_mode():
            eager.reset()
            eager.forward(prompt, torch.arange(CONTEXT), None, last=1)
            ref = eager.forward(tokens, positions, attend).float()
            eager.compact(CONTEXT, torch.zeros(0, dtype=torch.long))
            calls: dict[str, Callable[[], torch.Tensor]] = {}
            diffs = {}
            for mode in ["static", *modes]:
                key = (q, mode)
                if key not in paths:
                    paths[key] = StaticForward(case.model, CONTEXT + NEW_TOKENS + q, q,
                                               None if mode == "static" else mode)
                    paths[key].prefill(prompt)
                    start = time.perf_counter()
                    paths[key](tokens, positions, attend, CONTEXT)
                    compile_s[key] = time.perf_counter() - start
                path = paths[key]
                calls[mode] = lambda p=path, t=tokens, s=positions, a=attend: p(t, s, a, CONTEXT)
                diffs[mode] = max_diff(calls[mode](), ref)

            calls = {"eager": lambda t=tokens, s=positions, a=attend: eager.forward(t, s, a), **calls}
            times: dict[str, list[float]] = {name: [] for name in calls}
            start = time.perf_counter()
            calls["eager"]()
            eager.compact(CONTEXT, torch.zeros(0, dtype=torch.long))
            short = time.perf_counter() - start < SHORT_S  # sub-ms forwards need many more samples under load
            for _ in range(reps * (10 if short else 1)):
                for name, call in calls.items():
                    start = time.perf_counter()
                    call()
                    times[name].append(time.perf_counter() - start)
                    if name == "eager":  # back to the context, untimed
                        eager.compact(CONTEXT, torch.zeros(0, dtype=torch.long))
        rows.append({"model": case.label, "dtype": case.dtype, "q": k, "pad": q,
                     "ms": {name: median_ms(t) for name, t in times.items()},
                     "compile_s": {m: compile_s[(q, m)] for m in modes}, "diff": diffs})
    return rows


def cases(pairs: list[str], tree: tuple[tuple[int, int], ...]) -> list[Case]:
    """The models to measure: embedded target (bf16, at the (real q, padded q) of `tree`) and draft (bf16, f32, q = 1);
    tiny Llama and OPT targets and drafts (float32)."""
    out = []
    if "embedded" in pairs:
        pair = load_pair({**PAIRS["embedded"], "dtype": "float32", "device": "cpu"})
        out.append(Case("smollm2 target", copy.deepcopy(pair.target.model).to(torch.bfloat16), "bfloat16", tree))
        out.append(Case("draft v3", copy.deepcopy(pair.draft.model).to(torch.bfloat16), "bfloat16", ((1, 1),)))
        out.append(Case("draft v3", pair.draft.model, "float32", ((1, 1),)))
    for arch in ("llama", "opt"):
        if f"tiny-{arch}" in pairs:
            pair = load_pair({**TINY[arch], "device": "cpu"})
            out.append(Case(f"tiny {arch} target", pair.target.model, "float32", tree))
            out.append(Case(f"tiny {arch} draft", pair.draft.model, "float32", ((1, 1),)))
    return out


def print_rows(rows: list[dict], modes: list[str]) -> None:
    print(f"# load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    head = (f"{'model':<18} {'dtype':<9} {'q':>2} {'pad':>3} {'eager':>8} {'static':>8} "
            + " ".join(f"{m[:12]:>12}" for m in modes) + " " + " ".join(f"{'compile s':>9}" for _ in modes)
            + f" {'x eager':>7} {'diff static':>11} " + " ".join(f"{'diff comp':>9}" for _ in modes))
    print(head + "\n" + "-" * len(head))
    for r in rows:
        ms = r["ms"]
        best = min(ms[m] for m in modes or ["static"])
        print(f"{r['model']:<18} {r['dtype']:<9} {r['q']:>2} {r['pad']:>3} {ms['eager']:>8.2f} {ms['static']:>8.2f} "
              + " ".join(f"{ms[m]:>12.2f}" for m in modes) + " "
              + " ".join(f"{r['compile_s'][m]:>9.1f}" for m in modes)
              + f" {ms['eager'] / best:>7.2f} {r['diff']['static']:>11.2e} "
              + " ".join(f"{r['diff'][m]:>9.2e}" for m in modes), flush=True)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default=None, help="of embedded,tiny-llama,tiny-opt (default: all; --quick: embedded)")
    ap.add_argument("--modes", default="default,max-autotune-no-cudagraphs")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--cold", action="store_true",
                    help="compile into a fresh inductor cache (what a first run pays; default: the shared cache)")
    ap.add_argument("--quick", action="store_true",
                    help="embedded pair, target at q = 1 only, default compile mode, 7 repetitions (~4 minutes)")
    args = ap.parse_args(argv)
    modes = ["default"] if args.quick else [m for m in args.modes.split(",") if m]
    reps = 7 if args.quick else args.reps
    torch.set_num_threads(1)
    torch._dynamo.config.recompile_limit = 64  # every path is a new guard set on one code object
    if args.cold:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="static_compile_")
    print(f"$ {command()}\n# {machine()}\n# {CONTEXT}-token context; ms per call (median of {reps}, paths "
          "interleaved); x eager = eager / fastest compiled (static without --modes); diff = max |logit - eager "
          f"logit|; compile s with {'a fresh' if args.cold else 'the shared'} inductor cache")
    rows = []
    pairs = args.pairs or ("embedded" if args.quick else "embedded,tiny-llama,tiny-opt")
    tree = ((1, 1),) if args.quick else ((1, 1), (5, TREE), (TREE, TREE))
    for case in cases(pairs.split(","), tree):
        case_rows = measure(case, modes, reps)
        print_rows(case_rows, modes)
        rows += case_rows
    return rows


if __name__ == "__main__":
    main()
