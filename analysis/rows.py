"""One run's rows of the tidy tables, from its summary.json and records: the run row, the prompt rows, the step frame.

Run-level metrics come from each run's summary.json (written by rsd.harness.execute.execute); per-prompt metrics are
computed from records.jsonl with the same definitions (rsd.core.metrics, docs/algorithms.md#metrics). Fields added by
later versions of the runner (`expected_emitted`, `decode_token_rate`, `decode_s`, `ttft_s`, the summary's
`selection`) are optional: without them the matching columns are NaN.

The root optimum (`root_optimum`, `root_acceptance`, `fraction_of_optimum`; docs/algorithms.md#optimum) is read
from the summary per run, and per prompt and step from the records; runs made before it was recorded get NaN.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.columns import NAN, OPTIMUM, RUN_KEYS, SAMPLING
from rsd.core.metrics import block_efficiency, mbsu, metric_name, token_rate
from rsd.harness.schema import ModelPairConfig, budget_from

TIMES = ("draft", "target", "other")


@dataclass(frozen=True)
class StoredSetting:
    """What a run's stored config says about its setting, read through the typed config blocks (rsd.harness.schema): the
    model dtype, the draft model it loaded ('' where unrecorded: one pair name can run with several drafts, and their
    runs must never be pooled), the acceptance dial's mix as text ('' without one, so groupings never drop it) and
    the budget's number (None for a run without a budget: AR)."""

    dtype: str = "float32"
    draft: str = ""
    mix: str = ""
    x: int | None = None


def stored_setting(summary: Mapping[str, Any]) -> StoredSetting:
    """The StoredSetting of a summary (the defaults for what its stored config does not hold: a first-schema summary
    stored none)."""
    config = summary.get("config") or {}
    x = budget_from(config["budget"]).value if summary["budget"] else None
    if "model_pair" not in config:
        return StoredSetting(x=x)
    pair = ModelPairConfig.from_dict(config["model_pair"])
    return StoredSetting(pair.dtype or "float32", pair.draft or "", "" if pair.mix is None else f"{float(pair.mix):g}",
                         x)


def nan_if_none(value: float | None) -> float:
    """`value` as a float, NaN for None."""
    return NAN if value is None else float(value)


def prompt_set(summary: Mapping[str, Any]) -> str:
    """'32 prompts dolly-01..dolly-32 #3fa2c1': the prompts a run decoded, with a digest of their examples (of the
    prompt ids where the run's identity does not record the examples' hash)."""
    ids = list(summary["prompt_ids"])
    inputs = (summary.get("config") or {}).get("inputs") or {}
    digest = inputs.get("examples_sha256") or hashlib.sha256(json.dumps(ids).encode()).hexdigest()
    span = f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else "".join(ids)
    return f"{len(ids)} prompts {span} #{digest[:6]}"


def run_keys(run_dir: Path, summary: Mapping[str, Any]) -> dict:
    """The identifying columns of a run (RUN_KEYS)."""
    setting = stored_setting(summary)
    return {"method": summary["method"], "shape_tag": summary["shape_tag"], "budget": summary["budget"],
            "x": setting.x, "model_pair": summary["model_pair"], "draft": setting.draft, "mix": setting.mix,
            "dtype": setting.dtype, "dataset": summary["dataset"], "prompt_set": prompt_set(summary),
            **{k: summary["sampling"][k] for k in SAMPLING}, "seed": summary["seed"],
            "run_dir": str(run_dir)}


def expected_be(record: Mapping[str, Any]) -> float:
    """sum(expected_emitted) / target_calls (docs/algorithms.md#expected-yield); NaN without per-step expectations."""
    expected = record.get("expected_emitted")
    if expected is None or len(expected) != len(record["accepted_lengths"]):
        return NAN
    return block_efficiency(sum(expected), record["target_calls"])


def root_means(record: Mapping[str, Any]) -> dict:
    """One prompt's OPTIMUM: means over its steps that recorded both, and their ratio (NaN without such steps)."""
    pairs = [(o, a) for o, a in zip(record.get("root_optimum") or [], record.get("root_acceptance") or [])
             if o is not None and a is not None]
    optimum, accepted = sum(o for o, _ in pairs), sum(a for _, a in pairs)
    return {"root_optimum": optimum / len(pairs) if pairs else NAN,
            "root_acceptance": accepted / len(pairs) if pairs else NAN,
            "fraction_of_optimum": accepted / optimum if optimum > 0 else NAN}


def decode_rate(records: list[Mapping[str, Any]]) -> float:
    """Ratio of sums: tokens of the decode phase (`decode_tokens`, the tokens after the first step; older records:
    after the first token) / decode seconds; NaN unless every record has decode_s."""
    if not records or any(r.get("decode_s") is None for r in records):
        return NAN
    tokens = sum(r["decode_tokens"] if "decode_tokens" in r else max(r["new_tokens"] - 1, 0) for r in records)
    return token_rate(tokens, sum(r["decode_s"] for r in records))


def selection_columns(summary: Mapping[str, Any]) -> dict:
    """How the run's shape was chosen: the summary's `selection` (role tune/eval, the tuning prompts, the criterion).

    `selection_role` is '' for a run without a selection split; `selection_rank` is the shape's rank on the tuning
    prompts when the runner records it (1 = chosen first).
    """
    sel = summary.get("selection")
    if not isinstance(sel, Mapping):
        return {"selection_role": "", "selection_prompts": 0, "selected_by": "", "selection_rank": NAN}
    return {"selection_role": str(sel.get("role") or ""), "selection_prompts": len(sel.get("prompts") or []),
            "selected_by": str(sel.get("selected_by") or ""), "selection_rank": nan_if_none(sel.get("rank"))}


def environment(run_dir: Path) -> Mapping:
    """run.json's environment (what the run was timed on); empty when unreadable or unrecorded."""
    try:
        env = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("environment") or {}
    except (OSError, ValueError, AttributeError):
        env = {}
    return env if isinstance(env, Mapping) else {}


def provenance(run_dir: Path) -> dict:
    """From run.json's environment: `load_average` (1-minute load when the run started, NaN unrecorded),
    `cpu_count`, `git_sha`, `git_tree` ('clean', 'modified', or '' where the run predates the flag) and
    `git_diff_sha256` (of `git diff HEAD` in a modified tree)."""
    env = environment(run_dir)
    load_average = env.get("load_average")
    dirty = env.get("rsd_git_dirty")
    return {"load_average": float(load_average[0]) if isinstance(load_average, list) and load_average else NAN,
            "cpu_count": nan_if_none(env.get("cpu_count")), "git_sha": str(env.get("rsd_git_sha") or ""),
            "git_tree": "" if dirty is None else ("modified" if dirty else "clean"),
            "git_diff_sha256": str(env.get("rsd_git_diff_sha256") or "")}


def run_row(run_dir: Path, summary: Mapping[str, Any], records: list[Mapping[str, Any]]) -> dict:
    """One run's row: keys, summary metrics, the time split, acceptance by depth (accept_d1..), selection and
    provenance (run.json).

    Measured metrics come from the summary (run-level ratios of sums); `expected_block_efficiency` and
    `decode_token_rate` from the summary when it has them, else from the records (NaN when the records lack them
    too); OPTIMUM from the summary (NaN without); `<be>_prompt_mean`: the means over prompts of per-prompt ratios.
    """
    wall = summary["wall_s"]
    calls = sum(r["target_calls"] for r in records)
    expected = [r.get("expected_emitted") for r in records]
    expected_run = (block_efficiency(sum(sum(e) for e in expected), calls)
                    if records and all(e is not None for e in expected) else NAN)
    return {
        **run_keys(run_dir, summary),
        "shape": json.dumps(summary["shape"], sort_keys=True), "budget_value": summary["budget_value"],
        "task": summary["task"], "draft_length": summary["draft_length"], "tree_size": summary["tree_size"],
        "target_params": summary["target_params"], "draft_params": summary["draft_params"],
        "prompts": summary["prompts"], "new_tokens": summary["new_tokens"], "target_calls": summary["target_calls"],
        "draft_calls": summary["draft_calls"], "block_efficiency": summary["block_efficiency"],
        "expected_block_efficiency": nan_if_none(summary.get("expected_block_efficiency", expected_run)),
        # the tables' definition of a cell (analysis.tables.CELL_MEANS), per run: the mean of per-prompt ratios
        "block_efficiency_prompt_mean": float(np.mean([block_efficiency(r["new_tokens"], r["target_calls"])
                                                       for r in records])) if records else NAN,
        "expected_block_efficiency_prompt_mean": float(np.mean([expected_be(r) for r in records])) if records
        else NAN,
        "mbsu": summary["mbsu"], "token_rate": summary["token_rate"], "token_rate_ratio": NAN,
        "decode_token_rate": nan_if_none(summary.get("decode_token_rate") if summary.get("decode_token_rate")
                                         is not None else decode_rate(records)),
        "decode_token_rate_ratio": NAN,
        "accuracy": nan_if_none(summary["accuracy"]), "accuracy_ratio": NAN,  # ratios: set by add_ratios
        "accuracy_metric": metric_name(summary["task"]),
        "mean_accepted_length": summary["mean_accepted_length"],
        **{k: nan_if_none(summary.get(k)) for k in OPTIMUM},
        "tokens_verified_per_call": summary["tokens_verified_per_call"],
        "wall_s": wall, "elapsed_s": nan_if_none(summary.get("elapsed_s")),
        **{f"time_{t}_s": summary[f"time_{t}_s"] for t in TIMES},
        **{f"frac_{t}": summary[f"time_{t}_s"] / wall if wall > 0 else NAN for t in TIMES},
        **selection_columns(summary), **provenance(run_dir),
        **{f"accept_d{d}": a for d, a in enumerate(summary["acceptance_by_depth"], start=1)},
    }


def prompt_row(keys: Mapping[str, Any], record: Mapping[str, Any], draft_params: int, target_params: int) -> dict:
    """One prompt's row: run keys and the prompt's own BE (measured and expected), MBSU, token rates, times, score
    and root optimum (root_means)."""
    be = block_efficiency(record["new_tokens"], record["target_calls"])
    steps = record["accepted_lengths"]
    return {
        **keys, "prompt_id": record["prompt_id"], "prompt_tokens": record["prompt_tokens"],
        "new_tokens": record["new_tokens"], "target_calls": record["target_calls"],
        "draft_calls": record["draft_calls"], "block_efficiency": be, "expected_block_efficiency": expected_be(record),
        "mbsu": mbsu(be, record["draft_calls"] / record["target_calls"], draft_params, target_params),
        "token_rate": token_rate(record["new_tokens"], record["wall_s"]),
        "decode_token_rate": nan_if_none(record.get("decode_token_rate")),
        "ttft_s": nan_if_none(record.get("ttft_s")), "decode_s": nan_if_none(record.get("decode_s")),
        "mean_accepted_length": float(np.mean(steps)) if steps else NAN,
        "wall_s": record["wall_s"], **{f"time_{t}_s": record[f"time_{t}_s"] for t in TIMES},
        "score": nan_if_none(record.get("score")), **root_means(record),
    }


def step_frame(keys: Mapping[str, Any], records: list[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per target call of every prompt: run keys, prompt_id, step (from 1), accepted_length, tokens_verified,
    expected_emitted, root_optimum and root_acceptance (NaN where the record has none)."""
    counts = [len(r["accepted_lengths"]) for r in records]

    def per_step(key: str) -> np.ndarray:
        lists = [r.get(key) if len(r.get(key) or []) == n else [NAN] * n for r, n in zip(records, counts)]
        return np.array([nan_if_none(v) for vs in lists for v in vs], dtype=float)

    frame = pd.DataFrame({
        "prompt_id": np.repeat([r["prompt_id"] for r in records], counts),
        "step": np.concatenate([np.arange(1, n + 1) for n in counts]) if records else [],
        "accepted_length": [a for r in records for a in r["accepted_lengths"]],
        "tokens_verified": [t for r in records for t in r["tokens_verified"]],
        "expected_emitted": per_step("expected_emitted"), "root_optimum": per_step("root_optimum"),
        "root_acceptance": per_step("root_acceptance"),
    })
    return frame.assign(**keys)[[*RUN_KEYS, "prompt_id", "step", "accepted_length", "tokens_verified",
                                 "expected_emitted", "root_optimum", "root_acceptance"]]
