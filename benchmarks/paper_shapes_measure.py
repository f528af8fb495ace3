"""gpu_paper_shapes.py's measurements: random-weight models of the paper's architectures, the target forward's
scaling, one shape's token rate, step split and host syncs (eager and static-shape), the transformers check."""

from __future__ import annotations

import time

import torch
from common import generate_all, profile_prompts
from torch._dynamo.utils import counters
from torch.overrides import TorchFunctionMode
from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

from rsd.core.engine import Engine
from rsd.core.sampling import prompt_generator
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
