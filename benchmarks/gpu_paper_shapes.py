"""The paper's model shapes on a GPU, without downloading anything: random-weight models built from the exact
architectures of Llama-2-7B with a 68M Llama draft (JackFram/llama-68m) and OPT-13B with OPT-125M, in bfloat16.

First the target's forward time against the number of tokens verified (q = 1..32 after the prompt's context); then
per method and tree shape: the token rate and the engine's own split of a step into draft / target / other time (no
extra device syncs), the host syncs per step (outside and inside the models' forwards), and, from a second,
profiled pass, the finer split into forwards, drafting logic, verification, compaction and other. Random weights make
block efficiency meaningless (the draft is unrelated to the target): the timings are what this measures. For the
shapes in --static-shapes the same generation runs again through static-shape forwards (`--static compile`:
torch.compile, which on CUDA also captures CUDA graphs; `buffers`: the fixed shapes uncompiled, for the CPU smoke
run): the `static` column is its token rate over eager's, its warm-up (every compile) is timed apart.
`benchmarks/gpu_check.sh` runs the whole check (both pairs; AR and every method at L = 4, B = 14 and B = 30) in
under 8 minutes on one H200-class GPU and writes a JSON.

    python benchmarks/gpu_paper_shapes.py                  # CUDA, bfloat16, full size
    python benchmarks/gpu_paper_shapes.py --scale-down     # CPU, fp32, same families scaled down (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from common import COMPONENTS, SHAPES, command, generate_all, machine, profile_prompts
from torch._dynamo.utils import counters
from torch.overrides import TorchFunctionMode
from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import RSDC, RSDS, SD, SpecInfer, SpecTr
from rsd.models.adapter import CausalLM

ARCH = {  # the published configs' shape fields
    "llama-2-7b": ("llama", dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                 num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                                 max_position_embeddings=4096, rms_norm_eps=1e-5)),
    "llama-68m": ("llama", dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=2, num_attention_heads=12,
                                num_key_value_heads=12, vocab_size=32000, max_position_embeddings=2048,
                                rms_norm_eps=1e-6)),
    "opt-13b": ("opt", dict(hidden_size=5120, ffn_dim=20480, num_hidden_layers=40, num_attention_heads=40,
                            vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=5120)),
    "opt-125m": ("opt", dict(hidden_size=768, ffn_dim=3072, num_hidden_layers=12, num_attention_heads=12,
                             vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=768)),
}
PAIRS = {"llama-2-7b + llama-68m": ("llama-2-7b", "llama-68m"), "opt-13b + opt-125m": ("opt-13b", "opt-125m")}
QUICK_SHAPES = ("ar", "sd L=4", "spectr 3x4", "rsd_s 3x4", "rsd_s 6x5")
# One shape per method at the paper's target budget B = 14 drafted tokens (K = W = b_1 = 2, L = 7), next to
# common.SHAPES' L = 4 and B = 30 shapes.
BUDGET_14 = {
    "sd L=14 (B=14)": lambda: SD(14),
    "specinfer 2x7": lambda: SpecInfer(2, 7),
    "spectr 2x7": lambda: SpecTr(2, 7),
    "rsd_c 2-1-1-1-1-1-1": lambda: RSDC([2, 1, 1, 1, 1, 1, 1]),
    "rsd_s 2x7": lambda: RSDS(2, 7),
}
ALL_SHAPES = {**SHAPES, **BUDGET_14}
# AR, then every method at L = 4, at B = 14 and at B = 30 (the order they run in, so a deadline cuts B = 30 first).
CHECK_SHAPES = (*list(SHAPES)[:6], *BUDGET_14, *list(SHAPES)[6:])


def scaled(fields: dict, factor: int) -> dict:
    """The same family with width and depth divided by `factor` (heads by factor too) and a 512-token vocabulary."""
    out = dict(fields)
    heads = max(2, fields["num_attention_heads"] // factor)
    out.update(hidden_size=heads * 16, num_attention_heads=heads, num_hidden_layers=max(1, fields["num_hidden_layers"]
                                                                                         // factor), vocab_size=512)
    if "num_key_value_heads" in out:
        out["num_key_value_heads"] = heads
    for key in ("intermediate_size", "ffn_dim"):
        if key in out:
            out[key] = 4 * out["hidden_size"]
    if "word_embed_proj_dim" in out:
        out["word_embed_proj_dim"] = out["hidden_size"]
    return out


def build(name: str, device: torch.device, dtype: torch.dtype, scale: int) -> CausalLM:
    """A random-weight model of the named architecture, initialised directly on `device` in `dtype`."""
    arch, fields = ARCH[name]
    fields = scaled(fields, scale) if scale > 1 else fields
    common = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    config = LlamaConfig(**fields, **common) if arch == "llama" else OPTConfig(**fields, **common, enable_bias=True)
    config._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        torch.manual_seed(0)
        with device:
            model = (LlamaForCausalLM if arch == "llama" else OPTForCausalLM)(config)
    finally:
        torch.set_default_dtype(previous)
    return CausalLM(model.eval())


def forward_scaling(lm: CausalLM, context: int, sizes: list[int], reps: int) -> dict[int, float]:
    """Median ms of one target forward scoring n tree tokens (chain mask) after `context` cached tokens."""
    cuda = lm.device.type == "cuda"
    out = {}
    lm.reset()
    lm.forward(torch.arange(context) % 100 + 3, torch.arange(context), None, last=1)
    for n in sizes:
        times = []
        for _ in range(reps):
            attend = torch.ones(n, context + n, dtype=torch.bool).tril(context)
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            lm.forward(torch.arange(n) + 3, torch.arange(context, context + n), attend)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            lm.compact(context, torch.zeros(0, dtype=torch.long))
        out[n] = 1e3 * sorted(times)[len(times) // 2]
    return out


# Calls that make the host wait for the device when their tensor lives there; `nonzero` sizes its output on the host.
SYNC_CALLS = frozenset({"item", "tolist", "numpy", "nonzero", "__bool__", "__float__", "__int__", "__index__"})
HOST_COPIES = frozenset({"cpu", "to"})


class SyncCounter(TorchFunctionMode):
    """Counts, while `active`, the calls that read a tensor on `device` back to the host (on a GPU each is a sync),
    split into those inside a model forward (transformers' own) and the rest (the engine's)."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.active = False
        self.in_forward = 0
        self.counts = {"syncs_engine": 0, "syncs_forward": 0}

    def enter_forward(self, *_) -> None:
        self.in_forward += 1

    def leave_forward(self, *_) -> None:
        self.in_forward -= 1

    def reads_back(self, name: str, args: tuple, result: object) -> bool:
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if source is None or source.device.type != self.device.type:
            return False
        if name in SYNC_CALLS:
            return True
        return (name in HOST_COPIES and source.device.type != "cpu" and isinstance(result, torch.Tensor)
                and result.device.type == "cpu")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if self.active and self.reads_back(getattr(func, "__name__", ""), args, result):
            self.counts["syncs_forward" if self.in_forward else "syncs_engine"] += 1
        return result


def syncs_per_step(engine: Engine, prompt: list[int], new_tokens: int) -> dict[str, float]:
    """Host reads per step inside `Engine.step`, outside and inside the models' forwards, over the steps that draft
    the shape's full depth in one generation of `new_tokens` more tokens than that depth (the engine's clock adds one
    explicit synchronize per step on CUDA, not counted here)."""
    counter = SyncCounter(engine.target.device)
    models = {id(lm.model): lm.model for lm in (engine.target, engine.draft) if lm is not None}.values()
    hooks = [h for m in models for h in (m.register_forward_pre_hook(counter.enter_forward),
                                         m.register_forward_hook(counter.leave_forward))]
    step, depth, full_steps = engine.step, engine.drafter.draft_length, 0

    def counted(committed, gen, out, max_depth=None, *rest):
        nonlocal full_steps
        counter.active = max_depth is None or max_depth >= depth  # the last steps of a generation draft less
        full_steps += counter.active
        try:
            return step(committed, gen, out, max_depth, *rest)
        finally:
            counter.active = False

    engine.step = counted
    try:
        with counter:
            engine.generate(prompt, new_tokens + depth, prompt_generator(0, "syncs", engine.target.device))
    finally:
        del engine.step
        for hook in hooks:
            hook.remove()
    return {key: n / full_steps for key, n in counter.counts.items()}


def measure(engine: Engine, prompts: list[list[int]], max_new_tokens: int, sync_tokens: int) -> dict:
    """One shape: the profiled component split (after a warm-up), an unprofiled pass for the token rate and the
    engine's own draft / target / other ms per step (both with the prefill amortised in), the host syncs per step."""
    prof = profile_prompts(engine, prompts, max_new_tokens)
    outs = generate_all(engine, prompts, max_new_tokens)
    steps = sum(o.target_calls for o in outs)
    wall = sum(o.wall_s for o in outs)
    tokens = sum(len(o.new_token_ids) for o in outs)
    row = {"tokens_per_step": tokens / steps, "rate": tokens / wall,
           **{key: 1e3 * sum(getattr(o, attr) for o in outs) / steps for key, attr in
              (("draft_ms", "time_draft_s"), ("target_ms", "time_target_s"), ("other_ms", "time_other_s"))},
           "step_ms": 1e3 * wall / steps}
    row.update(prof.split(), outside=prof.overhead_share())
    row.update(syncs_per_step(engine, prompts[0], sync_tokens))
    return row


def measure_static(engine: Engine, mode: str, prompts: list[list[int]], max_new_tokens: int, eager_rate: float
                   ) -> dict:
    """The same shape through `mode` static-shape forwards (new CausalLMs on the same weights): two untimed passes
    over the prompts (they meet, and compile, every shape the timed pass meets: a forward compiled into a fresh
    cache compiles again once the cache exists; their seconds are reported apart), then the timed pass. A failure
    is reported in the row, not raised: the eager rows stay the result."""
    target = CausalLM(engine.target.model, static=mode)
    draft = CausalLM(engine.draft.model, static=mode) if engine.draft is not None else None
    static = Engine(target, draft, engine.drafter, engine.params, sorted(engine.eos), engine.vocab_size)
    skips = counters["inductor"]["cudagraph_skips"]
    try:
        start = time.perf_counter()
        for _ in range(2):
            generate_all(static, prompts, max_new_tokens)
        warm_up_s = time.perf_counter() - start
        outs = generate_all(static, prompts, max_new_tokens)
    except Exception as err:  # reported in the table: a GPU run must keep its eager results whatever compile does
        return {"static": "failed", "static_error": f"{type(err).__name__}: {err}"[:500]}
    finally:
        target.reset()
        if draft is not None:
            draft.reset()
    steps = sum(o.target_calls for o in outs)
    rate = sum(len(o.new_token_ids) for o in outs) / sum(o.wall_s for o in outs)
    return {"static": f"{rate / eager_rate:.2f}x", "static_rate": rate,
            "static_step_ms": 1e3 * sum(o.wall_s for o in outs) / steps, "static_warm_up_s": warm_up_s,
            "cudagraph_skips": counters["inductor"]["cudagraph_skips"] - skips}


def check_forward(dtype: torch.dtype) -> None:
    """Refuse early, in one line, a transformers whose forward does not fill rsd's KV cache (an older one takes the
    cache under another keyword and silently ignores it): one forward of a tiny CPU model."""
    import transformers

    lm = build("llama-68m", torch.device("cpu"), dtype, 32)
    try:
        lm.forward(torch.arange(4) + 3, torch.arange(4), None)
        problem = None if lm.cached_len == 4 else f"the forward left {lm.cached_len} of 4 tokens in the cache"
    except Exception as err:  # any failure here is an incompatible install, reported instead of a traceback
        problem = f"{type(err).__name__}: {err}"
    if problem:
        raise SystemExit(f"gpu_paper_shapes: transformers {transformers.__version__} cannot run rsd's forward "
                         f"({problem}); install one in the range pyproject.toml declares (README.md's install "
                         "command) or carry its wheel (benchmarks/README.md, gpu_check.sh)")


def write_report(path: Path, report: dict) -> None:
    """Replace `path` atomically: a crash mid-run leaves the last complete report."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1))
    os.replace(tmp, path)


MAIN_COLUMNS = (("B", "B", "d"), ("tokens_per_step", "tok/step", ".2f"), ("rate", "tok/s", ".1f"),
                ("draft_ms", "draft", ".2f"), ("target_ms", "target", ".2f"), ("other_ms", "other", ".2f"),
                ("step_ms", "step", ".2f"), ("syncs_engine", "syncs", ".1f"), ("syncs_forward", "fwd syncs", ".1f"))


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale-down", action="store_true", help="CPU, fp32, width and depth / 32 (a smoke run)")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"),
                    help="dtype of the full-size GPU run")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--sync-tokens", type=int, default=8,
                    help="new tokens beyond the shape's depth in the generation counting host syncs")
    ap.add_argument("--forward-sizes", default="1,2,4,8,16,32", help="tokens verified per timed target forward")
    ap.add_argument("--shapes", default="all",
                    help="comma-separated labels (common.SHAPES and BUDGET_14), 'quick', 'check' or 'all'")
    ap.add_argument("--pairs", default="all", help="comma-separated pair names, or 'all'")
    ap.add_argument("--time-budget-s", type=float, default=0.0,
                    help="seconds for the whole run, shared equally by the pairs; shapes past a pair's share are "
                    "skipped and listed (0: no limit)")
    ap.add_argument("--static", default="compile", choices=("off", "buffers", "compile"),
                    help="static-shape forwards to compare eager against (model_pair.static_forward's values)")
    ap.add_argument("--static-shapes", default="ar,sd L=4",
                    help="comma-separated labels measured again through --static (each compiles its shapes)")
    ap.add_argument("--static-budget-s", type=float, default=0.0,
                    help="seconds per pair for the static passes; a shape past it is skipped (0: no limit)")
    ap.add_argument("--json", type=Path, help="write the report here (rewritten after every shape)")
    args = ap.parse_args(argv)
    labels = {"all": list(SHAPES), "quick": list(QUICK_SHAPES), "check": list(CHECK_SHAPES)}.get(args.shapes) \
        or args.shapes.split(",")
    pairs = list(PAIRS) if args.pairs == "all" else args.pairs.split(",")
    args.static_labels = [] if args.static == "off" else [x for x in args.static_shapes.split(",") if x]
    unknown = [x for x in labels + args.static_labels if x not in ALL_SHAPES] + [x for x in pairs if x not in PAIRS]
    if unknown:
        raise SystemExit(f"gpu_paper_shapes: unknown shape or pair {unknown}; shapes: {list(ALL_SHAPES)}, "
                         f"pairs: {list(PAIRS)}")
    if args.sync_tokens < 1:
        raise SystemExit(f"gpu_paper_shapes: --sync-tokens={args.sync_tokens}; give at least 1 (a full-depth step)")
    if args.scale_down:
        device, dtype, scale = torch.device("cpu"), torch.float32, 32
    else:
        if not torch.cuda.is_available():
            raise SystemExit("gpu_paper_shapes: no CUDA device here; this measures a GPU (for the CPU smoke run use "
                             "--scale-down, or benchmarks/gpu_check.sh --cpu-smoke)")
        device, dtype, scale = torch.device("cuda"), getattr(torch, args.dtype), 1
    check_forward(dtype)
    begin = time.monotonic()
    print(f"$ {command()}\n# {machine()}")
    print(f"# random weights, {dtype}, {args.prompts} prompts of {args.prompt_tokens} tokens x {args.max_new_tokens} "
          f"new, T=1; ms per step; eager forwards; static = token rate through static-shape forwards "
          f"({args.static}) / eager's{'; SCALED DOWN /32' if scale > 1 else ''}")
    report = {"command": command(), "machine": machine(), "dtype": str(dtype), "scale_down": scale,
              "static_path": args.static, "args": {k: str(v) for k, v in vars(args).items()}, "pairs": []}
    rows = []
    for p, pair_name in enumerate(pairs):
        deadline = begin + args.time_budget_s * (p + 1) / len(pairs) if args.time_budget_s else float("inf")
        entry = {"pair": pair_name, "rows": [], "skipped": [], "static_skipped": []}
        report["pairs"].append(entry)
        run_pair(entry, labels, args, (device, dtype, scale), deadline, report)
        rows += entry["rows"]
    print(f"\n# {time.monotonic() - begin:.0f} s in all")
    return rows


def run_pair(entry: dict, labels: list[str], args: argparse.Namespace, where: tuple, deadline: float,
             report: dict) -> None:
    """Build one pair, time its target forward against q, then measure each shape until `deadline`, filling
    `entry` (part of `report`, rewritten to --json after every shape) and printing the tables."""
    device, dtype, scale = where
    target_name, draft_name = PAIRS[entry["pair"]]
    target, draft = build(target_name, device, dtype, scale), build(draft_name, device, dtype, scale)
    vocab = target.model.config.vocab_size
    gen0 = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (args.prompt_tokens,), generator=gen0).tolist() for _ in range(args.prompts)]
    sizes = [int(n) for n in args.forward_sizes.split(",")]
    entry.update(target_params=target.num_params, draft_params=draft.num_params,
                 target_forward_ms=forward_scaling(target, args.prompt_tokens, sizes, reps=5))
    print(f"\n## {entry['pair']}: target {target.num_params / 1e6:.0f}M, draft {draft.num_params / 1e6:.1f}M params")
    print("target forward ms vs tokens scored: "
          + ", ".join(f"{n}: {ms:.2f}" for n, ms in entry["target_forward_ms"].items()))
    head = f"{'method':<20} " + " ".join(f"{title:>9}" for _, title, _ in MAIN_COLUMNS) + f" {'static':>9}"
    print(head + "\n" + "-" * len(head))
    static_start = None
    for label in labels:
        if time.monotonic() > deadline:
            entry["skipped"].append(label)
            continue
        drafter = ALL_SHAPES[label]()
        engine = Engine(target, draft if drafter.draft_length else None, drafter, SamplingParams(1.0), [], vocab)
        row = {"pair": entry["pair"], "method": label, "B": drafter.max_tree_size,
               **measure(engine, prompts, args.max_new_tokens, args.sync_tokens), "static": "-"}
        if label in args.static_labels:
            static_start = time.monotonic() if static_start is None else static_start
            if args.static_budget_s and time.monotonic() - static_start > args.static_budget_s:
                entry["static_skipped"].append(label)
            else:
                row.update(measure_static(engine, args.static, prompts, args.max_new_tokens, row["rate"]))
        entry["rows"].append(row)
        if args.json:
            write_report(args.json, report)
        print(f"{label:<20} " + " ".join(f"{row[key]:>9{fmt}}" for key, _, fmt in MAIN_COLUMNS)
              + f" {row['static']:>9}", flush=True)
    if entry["skipped"]:
        print(f"skipped past this pair's share of --time-budget-s: {', '.join(entry['skipped'])}")
    if entry["static_skipped"]:
        print(f"static pass skipped past --static-budget-s: {', '.join(entry['static_skipped'])}")
    print_static(entry["rows"])
    print_components(entry["rows"])
    if device.type == "cuda":
        entry["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        print(f"peak GPU memory {entry['peak_gpu_memory_gib']:.1f} GiB")
        torch.cuda.reset_peak_memory_stats()
    if args.json:
        write_report(args.json, report)


def print_static(rows: list[dict]) -> None:
    """The static passes: token rate and ms per step next to eager's, the warm-up (compiles), CUDA-graph skips."""
    done = [r for r in rows if r["static"] != "-"]
    if not done:
        return
    print(f"\nstatic-shape forwards vs eager\n{'method':<20} {'eager/s':>8} {'static/s':>8} {'x eager':>8} "
          f"{'eager ms':>9} {'static ms':>9} {'warm-up s':>9} {'graph skips':>11}")
    for r in done:
        if r["static"] == "failed":
            print(f"{r['method']:<20} failed: {r['static_error']}")
            continue
        print(f"{r['method']:<20} {r['rate']:>8.1f} {r['static_rate']:>8.1f} {r['static']:>8} {r['step_ms']:>9.2f} "
              f"{r['static_step_ms']:>9.2f} {r['static_warm_up_s']:>9.1f} {r['cudagraph_skips']:>11}")


def print_components(rows: list[dict]) -> None:
    """The profiled pass's split: ms per step of each component and the share of the step outside the forwards."""
    head = f"{'method':<20} " + " ".join(f"{c:>10}" for c in COMPONENTS) + f" {'step':>8} {'outside':>8}"
    print("\nprofiled split (a sync around every component)\n" + head + "\n" + "-" * len(head))
    for row in rows:
        print(f"{row['method']:<20} " + " ".join(f"{row[c]:>10.3f}" for c in COMPONENTS)
              + f" {sum(row[c] for c in COMPONENTS):>8.3f} {100 * row['outside']:>7.1f}%")


if __name__ == "__main__":
    main()
