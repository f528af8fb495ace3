"""Shared by the benchmarks: method shapes, model pairs, a per-component profiler of the engine, the machine line."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager

import torch

from rsd.core.engine import Engine
from rsd.core.generation import Generation
from rsd.core.sampling import prompt_generator
from rsd.data import load_builtin
from rsd.drafters import AR, RSDC, RSDS, SD, SpecInfer, SpecTr
from rsd.drafters.base import Drafter
from rsd.harness.schema import ModelPairConfig
from rsd.models.embedded import default_pair_config
from rsd.models.feature_head.lm import HeadLM
from rsd.models.hardware import cpu_flags, resolve_dtype
from rsd.models.pairs import load_pair

# (label, drafter factory): AR, every method at L = 4 (K = W = b_1 = 3) and at B = 30 (K = W = b_1 = 6, L = 5).
SHAPES: dict[str, Callable[[], Drafter]] = {
    "ar": AR,
    "sd L=4": lambda: SD(4),
    "specinfer 3x4": lambda: SpecInfer(3, 4),
    "spectr 3x4": lambda: SpecTr(3, 4),
    "rsd_c 3-1-1-1": lambda: RSDC([3, 1, 1, 1]),
    "rsd_s 3x4": lambda: RSDS(3, 4),
    "sd L=30 (B=30)": lambda: SD(30),
    "specinfer 6x5": lambda: SpecInfer(6, 5),
    "spectr 6x5": lambda: SpecTr(6, 5),
    "rsd_c 6-1-1-1-1": lambda: RSDC([6, 1, 1, 1, 1]),
    "rsd_s 6x5": lambda: RSDS(6, 5),
}

PAIRS = {
    "tiny": {"name": "tiny_llama", "target": "tiny:llama", "draft": "tiny:llama",
             "tiny": {"vocab_size": 258, "seed": 0, "init_std": 0.02}},
    "embedded": default_pair_config(),
    "embedded-v1": {"name": "smollm2_v1", "target": "embedded:smollm2-135m-instruct",
                    "draft": "embedded:smollm2-draft", "chat": True},
    "embedded-eagle": {"name": "smollm2_eagle", "target": "embedded:smollm2-135m-instruct",
                       "draft": "embedded:smollm2-eagle", "draft_kind": "feature_head", "chat": True},
}


def cpu_name() -> str:
    """The CPU's model name ('AMD EPYC 9B14'): /proc/cpuinfo on Linux (where platform.processor() is often empty),
    else platform.processor(), else 'unknown'."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> str:
    """One line naming the hardware and software the numbers come from."""
    flags = "+".join(cpu_flags()) or "no SIMD flags read"  # bfloat16 is native with avx512_bf16/amx_bf16, else emulated
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU {cpu_name()} ({flags})"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{dev}, {os.cpu_count()} cores (load {load:.1f}), {torch.get_num_threads()} torch thread(s), "
            f"torch {torch.__version__}, python {platform.python_version()}")


def command() -> str:
    return "python " + " ".join(sys.argv)


COMPONENTS = ("target_fwd", "draft_fwd", "drafting", "verify", "compact", "other")


class Profile:
    """Seconds per engine component, accumulated by wrappers around the engine's parts (synchronising CUDA)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.s = dict.fromkeys(("target_fwd", "draft_fwd", "build", "score", "verify", "compact", "wall"), 0.0)
        self.steps = 0
        self.tokens = 0

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def wrap(self, obj: object, attr: str, key: str) -> None:
        """Replace obj.attr by a timed call adding to self.s[key]."""
        inner = getattr(obj, attr)

        def timed(*args, **kwargs):
            start = self.now()
            try:
                return inner(*args, **kwargs)
            finally:
                self.s[key] += self.now() - start

        setattr(obj, attr, timed)

    def split(self) -> dict[str, float]:
        """ms per step of each component: forwards, drafting logic (build minus draft forwards), verification,
        compaction, and other (target input/law preparation and the loop itself)."""
        s, n = self.s, max(self.steps, 1)
        parts = {"target_fwd": s["target_fwd"], "draft_fwd": s["draft_fwd"],
                 "drafting": s["build"] - s["draft_fwd"], "verify": s["verify"], "compact": s["compact"]}
        parts["other"] = s["wall"] - sum(parts.values())
        return {k: 1e3 * v / n for k, v in parts.items()}

    def overhead_share(self) -> float:
        """Fraction of the step spent outside model forwards."""
        return 1.0 - (self.s["target_fwd"] + self.s["draft_fwd"]) / self.s["wall"]


@contextmanager
def profiled(engine: Engine):
    """Instrument an engine (forwards, drafter.build, verification, compaction, score) for the duration."""
    prof = Profile(engine.target.device.type == "cuda")
    saved = []

    def wrap(obj, attr, key):
        saved.append((obj, attr, obj.__dict__.get(attr, None) if hasattr(obj, "__dict__") else None))
        prof.wrap(obj, attr, key)

    if engine.feature_layers:  # the target's forward that also keeps the features the head reads
        wrap(engine.target, "_feature_forward", "target_fwd")
    else:
        wrap(engine.target.model, "forward", "target_fwd")
    if isinstance(engine.draft, HeadLM):  # a feature head: its forward, its trimmed LM head and logits scatter
        wrap(engine.draft, "forward", "draft_fwd")
    elif engine.draft is not None and engine.draft.model is not engine.target.model:
        wrap(engine.draft.model, "forward", "draft_fwd")
    wrap(engine.drafter, "build", "build")
    wrap(engine, "_compact", "compact")
    wrap(engine.verifier, "verify", "verify")
    try:
        yield prof
    finally:
        for obj, attr, old in reversed(saved):
            if old is None:
                delattr(obj, attr)
            else:
                setattr(obj, attr, old)


def parser_and_prompts(description: str, **extra: dict
                       ) -> tuple[argparse.Namespace, object, list[list[int]], list[str]]:
    """The options every pair benchmark shares (--pair, --prompts, --max-new-tokens, --threads, --shapes, --dtype, plus
    `extra` name -> add_argument kwargs), parsed; then the loaded pair, the prompts' ids and the shape labels."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", choices=sorted(PAIRS), default="tiny")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shapes", default="all", help="comma-separated labels from common.SHAPES, or 'all'")
    ap.add_argument("--dtype", default="float32", help="float32, bfloat16, or auto (this machine's fast dtype)")
    for name, kwargs in extra.items():
        ap.add_argument(name, **kwargs)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.dtype = resolve_dtype(args.dtype, PAIRS[args.pair].get("device", "auto"))
    pair = load_pair(ModelPairConfig.from_dict({**PAIRS[args.pair], "dtype": args.dtype}))
    prompts = [pair.encode_prompt(ex.prompt)[:200] for ex in load_builtin("dolly_builtin")[: args.prompts]]
    labels = list(SHAPES) if args.shapes == "all" else args.shapes.split(",")
    return args, pair, prompts, labels


def generate_all(engine: Engine, prompts: list[list[int]], max_new_tokens: int) -> list[Generation]:
    """Every prompt generated in turn, prompt i with its own generator (seed 0, id i) on the target's device."""
    return [engine.generate(ids, max_new_tokens, prompt_generator(0, str(i), engine.target.device))
            for i, ids in enumerate(prompts)]


def profile_prompts(engine: Engine, prompts: list[list[int]], max_new_tokens: int):
    """One untimed warm-up, then every prompt generated under `profiled`: the profile, with steps, tokens and wall."""
    engine.warm_up(prompts[0])
    with profiled(engine) as prof:
        for out in generate_all(engine, prompts, max_new_tokens):
            prof.steps += out.target_calls
            prof.tokens += len(out.new_token_ids)
            prof.s["wall"] += out.wall_s
    return prof
