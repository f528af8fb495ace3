"""The resources a job gets: this machine's GPUs and memory, and what a Hydra launcher config requests per job."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

ASSUMED_GPU_GB = 80.0     # per-GPU memory when no GPU is visible here (a login node); RSD_GPU_MEMORY_GB overrides
GB = 1e9


def gpu_memory() -> tuple[int, float, str]:
    """(visible GPUs, memory per GPU in bytes, where that number comes from)."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if os.environ.get("RSD_GPU_MEMORY_GB"):
        return visible, float(os.environ["RSD_GPU_MEMORY_GB"]) * GB, "RSD_GPU_MEMORY_GB"
    if visible:
        return visible, min(torch.cuda.get_device_properties(i).total_memory for i in range(visible)), "visible"
    return 0, ASSUMED_GPU_GB * GB, "assumed; set RSD_GPU_MEMORY_GB"


def host_memory() -> float:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _count_gpus(value: Any) -> int | None:
    """GPUs in a submitit value: an int, or a 'TYPE:N' / 'gpu:TYPE:N' string (SLURM's --gpus-per-node / --gres)."""
    if value is None:
        return None
    text = str(value).strip()
    if text.startswith("gpu") or ":" in text:
        text = text.rpartition(":")[2]
    return int(text) if text.isdigit() else None


RESOURCE_KEYS = ("gpus_per_node", "gpus_per_task", "tasks_per_node", "gres", "mem_gb")  # read by launcher_resources


def launcher_resources(launcher: Mapping[str, Any]) -> tuple[int | None, float | None]:
    """(GPUs per job, CPU memory per job in GB) a Hydra launcher config requests (submitit: gpus_per_node, else
    gpus_per_task x tasks_per_node, else a gres 'gpu:N'; mem_gb); None where it says nothing."""
    gpus = _count_gpus(launcher.get("gpus_per_node"))
    if gpus is None and _count_gpus(launcher.get("gpus_per_task")) is not None:
        gpus = _count_gpus(launcher["gpus_per_task"]) * int(launcher.get("tasks_per_node") or 1)
    if gpus is None and str(launcher.get("gres") or "").startswith("gpu"):
        gpus = _count_gpus(launcher["gres"])
    mem = launcher.get("mem_gb")
    return gpus, float(mem) if mem is not None else None
