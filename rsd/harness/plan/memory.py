"""What a model pair needs in memory (weights, KV cache, prefill logits), read from model configs without loading
weights, against the devices a job gets."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any

from rsd.harness.plan.resources import GB, gpu_memory, host_memory
from rsd.harness.schema import Dataset, ModelPairConfig
from rsd.models.source_contract import ModelSource
from rsd.paths import CONF_DIR

PAPER_MODELS = CONF_DIR / "paper_models.yaml"
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
USABLE = 0.9              # share of device memory a pair may plan to use (the rest: CUDA context, activations)
CHAT_TEMPLATE_TOKENS = 64  # bound on the tokens a chat template adds around a prompt


@dataclass
class ModelInfo:
    spec: str
    available: bool
    where: str
    params: int | None = None
    facts_from: str = "unknown"
    config: Any = None


@dataclass
class PairEstimate:
    name: str
    dtype: str
    tokens: int
    weights: float
    kv: float
    logits: float
    devices: str
    capacity: float
    gpus_needed: int | None

    @property
    def need(self) -> float:
        return self.weights + self.kv + self.logits

    @property
    def fits(self) -> bool:
        return self.need <= self.capacity


@functools.cache
def paper_table() -> dict[str, dict]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(PAPER_MODELS)) if PAPER_MODELS.is_file() else {}


def model_config(source: ModelSource) -> tuple[Any, str]:
    """(a transformers config, where it came from) without loading weights: the source's own files, else the paper
    table; (None, 'unknown') when neither knows it."""
    config = source.config()
    if config is not None:
        return config, source.config_origin
    facts = paper_table().get(source.spec)
    if facts:
        from transformers import AutoConfig

        facts = dict(facts)
        return AutoConfig.for_model(facts.pop("model_type"), **facts), "paper table"
    return None, "unknown"


@functools.cache
def _count(config_json: str) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = json.loads(config_json)
    config = AutoConfig.for_model(data.pop("model_type"), **data)
    with torch.device("meta"):  # shapes only: no memory, no weights
        model = AutoModelForCausalLM.from_config(config)
    model.tie_weights()  # transformers 5.0 leaves a tied LM head untied after from_config (5.25 ties it)
    return sum(p.numel() for p in model.parameters())


def count_params(config: Any) -> int:
    """Exact parameter count of an architecture (instantiated on the meta device)."""
    return _count(json.dumps(config.to_diff_dict() | {"model_type": config.model_type}, sort_keys=True, default=str))


def kv_bytes_per_token(config: Any, dtype_bytes: int) -> int:
    """Keys and values of every layer for one token."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * dtype_bytes


def prompt_bound(dataset: Dataset) -> int | None:
    """An upper bound on the longest prompt's tokens for built-in and local sets (UTF-8 bytes + a chat template);
    None for hub sets (not read here)."""
    if dataset.source == "hub":
        return None
    from rsd.data import load_examples

    return max(len(ex.prompt.encode("utf-8")) for ex in load_examples(dataset)) + CHAT_TEMPLATE_TOKENS


def estimate_pair(mp: ModelPairConfig, target: ModelInfo, draft: ModelInfo | None, prompt: int | None,
                  generated: int, gpus_requested: int | None, job_memory_gb: float | None = None
                  ) -> PairEstimate | None:
    """Memory a pair needs (weights + KV cache + prefill logits) for a prompt of `prompt` tokens (None: the full
    context) plus `generated` = max_new_tokens + tree positions, against the devices the job gets (the launcher's
    GPUs and memory when it requests them, else this machine's)."""
    if target.config is None or target.params is None:
        return None
    dtype = str(mp.dtype or "float32")
    nbytes = DTYPE_BYTES.get(dtype, 4)
    models = [target] + ([draft] if draft is not None and draft.config is not None else [])
    context = min(int(getattr(m.config, "max_position_embeddings", 0) or 1 << 30) for m in models)
    tokens = context if prompt is None else min(context, prompt + generated + 1)
    weights = (target.params + (draft.params or 0 if draft is not None else 0)) * nbytes  # a head's too
    kv = sum(kv_bytes_per_token(m.config, nbytes) for m in models) * tokens
    logits = tokens * target.config.vocab_size * 4  # the prefill's logits, made float32 by the sampling transform
    visible, per_gpu, source = gpu_memory()
    device = str(mp.device or "auto")
    n_gpus = gpus_requested if gpus_requested is not None else visible
    if device == "cpu" or n_gpus == 0:
        ram = job_memory_gb * GB if job_memory_gb is not None else host_memory()
        capacity = USABLE * ram
        devices = f"CPU RAM {ram / GB:.0f} GB" + (" (hydra.launcher.mem_gb)" if job_memory_gb is not None else "")
        needed = None
    else:
        used = n_gpus if mp.device_map else 1
        capacity = USABLE * used * per_gpu
        devices = (f"{used} of {n_gpus} GPU(s) x {per_gpu / GB:.0f} GB ({source})"
                   + ("" if mp.device_map else ", device_map=null: one GPU"))
        needed = math.ceil((weights + kv + logits) / (USABLE * per_gpu))
    return PairEstimate(mp.name, dtype, tokens, weights / GB, kv / GB, logits / GB, devices, capacity / GB,
                        needed)


def model_info(source: ModelSource) -> ModelInfo:
    ok, where = source.status()
    config, facts_from = model_config(source)
    params = count_params(config) if config is not None else source.num_params()
    if config is None and params is not None:
        facts_from = "its own files"
    return ModelInfo(source.spec, ok, where, params, facts_from, config)
