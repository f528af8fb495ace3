"""The paper's model shapes on a GPU, without downloading anything: random-weight models built from the exact
architectures of Llama-2-7B with a 68M Llama draft (JackFram/llama-68m) and OPT-13B with OPT-125M, in fp16.

Per method at L = 4 and B = 30: ms per step split into forwards, drafting, verification, compaction and other, the
share of the step outside model forwards, and the token rate; then the target's forward time against the number of
tokens verified (1..30). Random weights make block efficiency meaningless (the draft is unrelated to the target):
the timings are what this measures. Meant to finish in under 5 minutes on one H200-class GPU.

    python benchmarks/gpu_paper_shapes.py                  # CUDA, fp16, full size
    python benchmarks/gpu_paper_shapes.py --scale-down     # CPU, fp32, same families scaled down (seconds)
"""

from __future__ import annotations

import argparse
import time

import torch
from common import COMPONENTS, SHAPES, command, machine, profiled
from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

from rsd.engine import Engine
from rsd.models.adapter import CausalLM
from rsd.sampling import SamplingParams, prompt_generator

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


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale-down", action="store_true", help="CPU, fp32, width and depth / 32 (a smoke run)")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--shapes", default="all", help="comma-separated labels of common.SHAPES, 'quick' or 'all'")
    ap.add_argument("--pairs", default="all", help="comma-separated pair names, or 'all'")
    args = ap.parse_args(argv)
    if args.scale_down:
        device, dtype, scale = torch.device("cpu"), torch.float32, 32
    else:
        if not torch.cuda.is_available():
            raise SystemExit("gpu_paper_shapes needs CUDA; use --scale-down for the CPU smoke run")
        device, dtype, scale = torch.device("cuda"), torch.float16, 1
    labels = {"all": list(SHAPES), "quick": list(QUICK_SHAPES)}.get(args.shapes) or args.shapes.split(",")
    pairs = list(PAIRS) if args.pairs == "all" else args.pairs.split(",")
    print(f"$ {command()}\n# {machine()}")
    print(f"# random weights, {dtype}, {args.prompts} prompts of {args.prompt_tokens} tokens x {args.max_new_tokens} "
          f"new, T=1; ms per step{'; SCALED DOWN /32' if scale > 1 else ''}")
    rows = []
    for pair_name in pairs:
        target_name, draft_name = PAIRS[pair_name]
        target, draft = build(target_name, device, dtype, scale), build(draft_name, device, dtype, scale)
        vocab = target.model.config.vocab_size
        gen0 = torch.Generator().manual_seed(0)
        prompts = [torch.randint(3, vocab, (args.prompt_tokens,), generator=gen0).tolist() for _ in range(args.prompts)]
        print(f"\n## {pair_name}: target {target.num_params / 1e6:.0f}M, draft {draft.num_params / 1e6:.1f}M params")
        head = (f"{'method':<18} " + " ".join(f"{c:>10}" for c in COMPONENTS)
                + f" {'step':>8} {'outside':>8} {'tok/s':>7}")
        print(head + "\n" + "-" * len(head))
        for label in labels:
            drafter = SHAPES[label]()
            engine = Engine(target, draft if drafter.draft_length else None, drafter, SamplingParams(1.0), [], vocab)
            engine.warm_up(prompts[0])
            with profiled(engine) as prof:
                for i, ids in enumerate(prompts):
                    out = engine.generate(ids, args.max_new_tokens, prompt_generator(0, str(i), device))
                    prof.steps += out.target_calls
                    prof.tokens += len(out.new_token_ids)
                    prof.s["wall"] += out.wall_s
            split = prof.split()
            rate = prof.tokens / prof.s["wall"]
            rows.append({"pair": pair_name, "method": label, **split, "outside": prof.overhead_share(), "rate": rate})
            print(f"{label:<18} " + " ".join(f"{split[c]:>10.3f}" for c in COMPONENTS)
                  + f" {sum(split.values()):>8.3f} {100 * prof.overhead_share():>7.1f}% {rate:>7.1f}", flush=True)
        sizes = [1, 2, 4, 8, 16, 30, 31]
        scaling = forward_scaling(target, args.prompt_tokens, sizes, reps=5)
        print("target forward ms vs tokens scored (incl. the root): "
              + ", ".join(f"{n}: {ms:.2f}" for n, ms in scaling.items()))
        del target, draft
        if device.type == "cuda":
            print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    return rows


if __name__ == "__main__":
    main()
