"""How a model spec string reads, with no I/O: `tiny:ARCH`, `embedded:NAME`, a local path, or a hub id."""

from __future__ import annotations


def looks_like_local_path(spec: str) -> bool:
    """True for a model spec that can only be a path: /x, .x (./x, ../x: hub ids never start with a dot), ~/x, or more
    than one '/' (hub ids have one)."""
    return spec.startswith(("/", ".", "~")) or spec.count("/") > 1


STATIC_MODES = ("off", "buffers", "compile")  # CausalLM's forward: eager, fixed shapes, fixed shapes compiled
