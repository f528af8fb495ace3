"""Metrics of docs/algorithms.md#metrics: block efficiency, memory-bound speed-up, token rate, task scores."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from functools import lru_cache


def block_efficiency(new_tokens: int, target_calls: int) -> float:
    """Generated tokens per target forward call (prefill merged into the first call)."""
    return new_tokens / target_calls if target_calls else float("nan")


def mbsu(block_eff: float, draft_calls_per_step: float, draft_params: int, target_params: int) -> float:
    """BE / (1 + L r), r = draft/target parameters, L = draft forward calls per target call."""
    return block_eff / (1.0 + draft_calls_per_step * draft_params / target_params)


def token_rate(new_tokens: int, seconds: float) -> float:
    """Generated tokens per wall-clock decoding second."""
    return new_tokens / seconds if seconds > 0 else float("nan")


def acceptance_by_depth(accepted_lengths: Iterable[int], depth: int) -> list[float]:
    """For d = 1..depth: the fraction of steps whose accepted path reached depth d."""
    lengths = list(accepted_lengths)
    if not lengths:
        return [float("nan")] * depth
    return [sum(a >= d for a in lengths) / len(lengths) for d in range(1, depth + 1)]


TASK_METRIC = {"summarization": "rougeL", "instruction": "rougeL", "translation": "bleu"}
METRIC_NAMES = {"rougeL": "ROUGE-L", "bleu": "BLEU"}


def metric_name(task: str | None) -> str:
    """The display name of a task's score ('ROUGE-L', 'BLEU'); '' for a task without a score."""
    return METRIC_NAMES[TASK_METRIC[task]] if task in TASK_METRIC else ""


def task_score(task: str | None, prediction: str, reference: str | None) -> float | None:
    """ROUGE-L F1 (summarisation, instructions) or sentence BLEU (translation) in [0, 100]; None without reference."""
    if reference is None or task not in TASK_METRIC:
        return None
    if TASK_METRIC[task] == "bleu":
        import sacrebleu

        return float(sacrebleu.sentence_bleu(prediction, [reference]).score)
    return 100.0 * _rouge().score(reference, prediction)["rougeL"].fmeasure


@lru_cache(maxsize=1)
def _rouge():
    from rouge_score import rouge_scorer

    logging.getLogger("absl").setLevel(logging.WARNING)  # rouge_score logs every scorer construction at INFO
    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def corpus_score(task: str | None, predictions: list[str], references: list[str | None]) -> float | None:
    """Corpus BLEU for translation; mean ROUGE-L otherwise; None if any reference is missing."""
    if task not in TASK_METRIC or not predictions or any(r is None for r in references):
        return None
    if TASK_METRIC[task] == "bleu":
        import sacrebleu

        return float(sacrebleu.corpus_bleu(predictions, [list(references)]).score)
    scores = [task_score(task, p, r) for p, r in zip(predictions, references)]
    return sum(scores) / len(scores)


def root_optimum_summary(records: list[Mapping]) -> dict:
    """Means over steps of the root optimum and the root acceptance, and their ratio (docs/algorithms.md#optimum),
    over the steps that recorded both; None where no step did (older records, AR, a verifier without it)."""
    pairs = [(o, a) for r in records for o, a in zip(r.get("root_optimum") or [], r.get("root_acceptance") or [])
             if o is not None and a is not None]
    if not pairs:
        return {"root_optimum": None, "root_acceptance": None, "fraction_of_optimum": None}
    optimum, accepted = sum(o for o, _ in pairs), sum(a for _, a in pairs)
    return {"root_optimum": optimum / len(pairs), "root_acceptance": accepted / len(pairs),
            "fraction_of_optimum": accepted / optimum if optimum > 0 else None}


def summarize_records(records: list[Mapping], draft_params: int, target_params: int) -> dict:
    """Run-level metrics from per-prompt records: ratios of sums (each generated token weighs the same)."""
    tokens = sum(r["new_tokens"] for r in records)
    calls = sum(r["target_calls"] for r in records)
    draft_calls = sum(r["draft_calls"] for r in records)
    wall = sum(r["wall_s"] for r in records)
    be = block_efficiency(tokens, calls)
    steps = [a for r in records for a in r["accepted_lengths"]]
    # exact per-step expectations (docs/algorithms.md#expected-yield); nan for records written before they were recorded
    expected = (sum(sum(r["expected_emitted"]) for r in records)
                if all("expected_emitted" in r for r in records) else float("nan"))
    depth = max([r.get("draft_length", 0) for r in records] + [0])
    return {
        **root_optimum_summary(records),
        "prompts": len(records),
        "new_tokens": tokens,
        "target_calls": calls,
        "draft_calls": draft_calls,
        "block_efficiency": be,
        "expected_block_efficiency": block_efficiency(expected, calls),
        "mbsu": mbsu(be, draft_calls / calls if calls else 0.0, draft_params, target_params),
        "token_rate": token_rate(tokens, wall),
        # the decode phase (after each prompt's first step): ratio of sums; None for records made before it existed
        "decode_token_rate": (token_rate(sum(r["decode_tokens"] for r in records), sum(r["decode_s"] for r in records))
                              if records and all("decode_tokens" in r for r in records) else None),
        "wall_s": wall,
        "time_draft_s": sum(r["time_draft_s"] for r in records),
        "time_target_s": sum(r["time_target_s"] for r in records),
        "time_other_s": sum(r["time_other_s"] for r in records),
        "mean_accepted_length": sum(steps) / len(steps) if steps else float("nan"),
        "acceptance_by_depth": acceptance_by_depth(steps, depth),
        "tokens_verified_per_call": sum(sum(r["tokens_verified"]) for r in records) / calls if calls else 0.0,
    }
