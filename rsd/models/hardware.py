"""What the machine can do fast, read without running anything: CPU vector extensions and the `auto` dtype."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

# The x86 flags (from /proc/cpuinfo) that decide which dtypes run at full speed on the CPU.
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


@functools.cache
def cpu_flags() -> tuple[str, ...]:
    """The CPU_FLAGS this machine's CPU reports (empty where /proc/cpuinfo does not exist, e.g. macOS)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ()
    for line in text.splitlines():
        if line.startswith("flags"):
            present = set(line.split(":", 1)[1].split())
            return tuple(f for f in CPU_FLAGS if f in present)
    return ()


def resolve_dtype(requested: str | None, device: str) -> str:
    """The dtype a model pair loads in: `requested` unless it is `auto`, which means bfloat16 where it is fast (a
    CUDA device with bf16 support, or a CPU with AVX512-BF16 or AMX, where a forward of a few tokens costs about one
    forward of one: the memory-bound regime) and float32 elsewhere (plain AVX2/AVX-512 emulate bf16 slowly)."""
    if requested not in (None, "auto"):
        return requested
    if requested is None:
        return "float32"
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if cuda:
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "bfloat16" if {"avx512_bf16", "amx_bf16"} & set(cpu_flags()) else "float32"
