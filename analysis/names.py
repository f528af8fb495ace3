"""Display names: methods, model pairs, datasets, sampling settings and task scores, for tables and figure titles.

Unknown ids are shown unchanged, so a user's own pair, dataset or drafter still gets a (less pretty) title.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rsd.registry import DRAFTER_LABELS, DRAFTERS

BUILTIN = tuple(DRAFTERS)  # table and legend order
METHODS = DRAFTER_LABELS
PAIRS = {
    "smollm2": "SmolLM2-135M + 7M draft",
    "smollm2_v1": "SmolLM2-135M + v1 draft",
    "smollm2_v2": "SmolLM2-135M + v2 draft",
    "smollm2_eagle": "SmolLM2-135M + feature head (EAGLE-style)",
    "smollm2_dial": "SmolLM2-135M + acceptance dial (its draft mixed with the target)",
    "tiny_llama": "tiny random Llama pair", "tiny_opt": "tiny random OPT pair",
    "tiny_llama_dial": "tiny random Llama pair + acceptance dial",
    "tiny_llama_eagle": "tiny random Llama pair + feature head",
    **{f"llama2_{s}": f"Llama 2 {s.upper()} + Llama-68M draft" for s in ("7b", "13b", "70b")},
    **{f"llama2_chat_{s}": f"Llama 2-Chat {s.upper()} + Llama-68M draft" for s in ("7b", "13b", "70b")},
    **{f"opt_{d}m_{t}b": f"OPT-{t}B + OPT-{d}M draft" for d in (125, 350) for t in (13, 30, 66)},
}
DATASETS = {"dolly_builtin": "Dolly-style prompts", "xsum_builtin": "XSum-style", "wmt_builtin": "WMT-style",
            "dolly": "Dolly 15k", "xsum": "XSum", "wmt": "WMT18 de-en", "local": "local prompts"}
KINDS = {"fixed_length": ("fixed draft length", "L"), "fixed_compute": ("fixed target compute", "B")}
SCORES = {"summarization": "ROUGE-L", "instruction": "ROUGE-L", "translation": "BLEU"}  # as metrics.TASK_METRIC


def method_order(methods: Iterable[str]) -> list[str]:
    """The built-in methods in paper order (a tree-level verifier right after its drafts' method), then others."""
    methods = set(methods)
    return [m for m in BUILTIN if m in methods] + sorted(methods - set(BUILTIN))


def method_label(method: str) -> str:
    """The display name of a method ('rsd_c' -> 'RSD-C'; unknown names unchanged)."""
    return METHODS.get(method, method)


def pair_name(pair: str) -> str:
    """'smollm2' -> 'SmolLM2-135M + 7M draft'; unknown ids unchanged."""
    return PAIRS.get(pair, pair)


def dataset_name(dataset: str) -> str:
    """'dolly_builtin' -> 'Dolly-style prompts'; unknown ids unchanged; 'a+b' (pooled, analysis.pairs) ->
    'A + B (pooled)'."""
    if "+" in dataset:
        return " + ".join(DATASETS.get(d, d) for d in dataset.split("+")) + " (pooled)"
    return DATASETS.get(dataset, dataset)


def score_name(tasks: Iterable[Any]) -> str:
    """The task score of a set of runs ('ROUGE-L', 'BLEU', 'ROUGE-L / BLEU'), 'task score' when unknown."""
    names = sorted({SCORES[t] for t in tasks if t in SCORES})
    return " / ".join(names) if names else "task score"


def is_greedy(sampling: Mapping[str, Any]) -> bool:
    """Temperature 0 or top-k 1: the target's argmax decides every token."""
    return float(sampling["temperature"]) == 0.0 or sampling["top_k"] == 1


def sampling_name(setting: Mapping[str, Any]) -> str:
    """'T = 1', 'T = 0 (greedy)', plus top-k / top-p only where they cut the distribution."""
    parts = [f"T = {float(setting['temperature']):g}" + (" (greedy)" if float(setting["temperature"]) == 0 else "")]
    if setting["top_k"]:
        parts.append(f"top-k = {setting['top_k']}")
    if float(setting["top_p"]) < 1:
        parts.append(f"top-p = {float(setting['top_p']):g}")
    return ", ".join(parts)


def setting_title(setting: Mapping[str, Any]) -> str:
    """A readable one-line name of a setting: 'SmolLM2-135M + 7M draft, Dolly-style prompts, 32 prompts
    dolly-01..dolly-32 #3fa2c1, T = 1, 64 new tokens'.

    The draft model where the run's config names it (one pair name may be run with several drafts); the dtype only
    when it is not float32 (half-precision runs are their own setting); the prompt set
    (analysis.rows.prompt_set) where the setting has one; the acceptance dial's mix ('mix a = 0.6') where it is set.
    """
    dtype = setting.get("dtype", "float32")
    prompts = [setting["prompt_set"]] if setting.get("prompt_set") else []
    mix = [f"mix a = {setting['mix']}"] if setting.get("mix") else []
    draft = setting.get("draft") or ""
    drafts = [f"draft {draft.removeprefix('embedded:')}"] if draft else []
    return ", ".join([pair_name(setting["model_pair"]), *drafts, *mix, dataset_name(setting["dataset"]), *prompts,
                      sampling_name(setting), f"{setting['max_new_tokens']} new tokens",
                      *([dtype] if dtype != "float32" else [])])
