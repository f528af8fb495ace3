"""Load run directories into tidy tables: one row per run, one per prompt, one per verification step.

Run-level metrics come from each run's summary.json (written by rsd.harness.execute.execute); per-prompt metrics are
computed from records.jsonl with the same definitions (rsd.core.metrics, docs/algorithms.md#metrics). Ratios are to the
AR run with the same model pair, dtype, dataset, sampling settings and seed; per-prompt ratios divide a prompt's value
by that AR run's value. Fields added by later versions of the runner (`expected_emitted`, `decode_token_rate`,
`decode_s`, `ttft_s`, the summary's `selection`) are optional: without them the matching columns are NaN.

Only complete runs are read: a run counts when rsd.harness.store.summary_problem accepts it (summary marked complete,
records checksum matching, every record valid, every stored metric equal to its recomputation from the records). Every
other run directory is named, with the reason, in `Tables.skipped` and a warning; the records are read with the store's
reader (rsd.harness.store.scan_records), so the runner and the analysis see the same records.

Runs are grouped by what makes them comparable (SETTING: model pair, the acceptance dial's mix, dtype, dataset, the
prompt set decoded, sampling and max_new_tokens); runs of two groups are never averaged or compared with each other.

The root optimum (`root_optimum`, `root_acceptance`, `fraction_of_optimum`; docs/algorithms.md#optimum) is read
from the summary per run, and per prompt and step from the records; runs made before it was recorded get NaN. A
dial run (model_pair.mix set) whose draft model ran has its speed metrics (SPEED) set to NaN and `speed_omitted`
True: the dial's draft forward also runs the target, so its token rate and MBSU do not measure speed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.names import is_greedy
from rsd.core.metrics import block_efficiency, mbsu, metric_name, token_rate
from rsd.harness.schema import ModelPairConfig, budget_from
from rsd.harness.store import scan_records, summary_problem

log = logging.getLogger(__name__)

SAMPLING = ("temperature", "top_k", "top_p", "max_new_tokens")
# runs of different settings are never averaged or compared together
SETTING = ("model_pair", "draft", "mix", "dtype", "dataset", "prompt_set", *SAMPLING)
AR_KEYS = (*SETTING, "seed")  # a run is compared with the AR run that matches on these
RUN_KEYS = ("method", "shape_tag", "budget", "x", *AR_KEYS, "run_dir")  # repeated in the prompt and step tables
TIMES = ("draft", "target", "other")
SE_METRICS = ("block_efficiency", "expected_block_efficiency", "mbsu", "token_rate", "decode_token_rate")
OPTIMUM = ("root_optimum", "root_acceptance", "fraction_of_optimum")  # docs/algorithms.md#optimum
SPEED = ("mbsu", "token_rate", "token_rate_ratio", "decode_token_rate", "decode_token_rate_ratio")  # not for the dial
DIAL_NOTE = ("– for the acceptance dial's runs (model_pair.mix set): their draft forward also runs the target, so "
             "token rate and MBSU do not measure speed; their block efficiency, expected block efficiency and root "
             "optimum are reported in the other tables.")
NAN = float("nan")


@dataclass(frozen=True)
class Tables:
    """The tidy tables of a set of completed runs."""

    runs: pd.DataFrame
    prompts: pd.DataFrame
    steps: pd.DataFrame
    skipped: list[str] = field(default_factory=list)  # one line per run directory left out, with the reason


class Unreadable(ValueError):
    """A run directory whose summary cannot be used (the message names the file and the reason)."""


def find_run_dirs(roots: Iterable[Path | str]) -> list[Path]:
    """Every directory at or below `roots` holding a run.json, followed through symbolic links, sorted, once (a run
    reached by two paths is listed by the first); a missing root raises. Paths stay as found, made absolute."""
    found: dict[str, Path] = {}
    for root in map(Path, roots):
        if not root.exists():
            raise FileNotFoundError(f"no such results directory: {root}")
        seen: set[str] = set()
        for here, dirs, files in os.walk(root.absolute(), followlinks=True):
            real = os.path.realpath(here)
            if real in seen:  # a link back up the tree: walked already
                dirs.clear()
                continue
            seen.add(real)
            if "run.json" in files:
                found.setdefault(real, Path(here))
    return sorted(found.values())


def completed(run_dirs: Iterable[Path]) -> list[Path]:
    """The run directories with a summary.json, each one without it skipped with a warning naming it (for audits of
    the records themselves, e.g. analysis.calibration; `load` reads only runs the store accepts)."""
    done = []
    for run_dir in run_dirs:
        if (run_dir / "summary.json").exists():
            done.append(run_dir)
        else:
            log.warning("skipping incomplete run (no summary.json): %s", run_dir)
    return done


def valid_records(path: Path) -> list[dict]:
    """The valid records of a records file, read by the store's reader (each problem named in a warning)."""
    records, problems = scan_records(path)
    for problem in problems:
        log.warning("%s", problem)
    return records


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


def provenance(run_dir: Path) -> dict:
    """From run.json's environment: `load_average` (1-minute load when the run started, NaN unrecorded),
    `cpu_count`, `git_sha`, `git_tree` ('clean', 'modified', or '' where the run predates the flag) and
    `git_diff_sha256` (of `git diff HEAD` in a modified tree)."""
    try:
        env = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("environment") or {}
    except (OSError, ValueError, AttributeError):
        env = {}
    env = env if isinstance(env, Mapping) else {}
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


def ar_baselines(runs: pd.DataFrame) -> pd.DataFrame:
    """Per AR_KEYS: the AR token rate, decode token rate and accuracy (mean if several AR runs match)."""
    ar = runs[runs["method"] == "ar"]
    means = ar.groupby(list(AR_KEYS), dropna=False)[["token_rate", "decode_token_rate", "accuracy"]].mean()
    return means.rename(columns=lambda c: f"ar_{c}").reset_index()


def dial_drafting(runs: pd.DataFrame) -> pd.Series:
    """Dial runs (mix set) that call their draft model: the dial's draft forward also runs the target, so their
    speeds mean nothing (AR and model-free drafters keep theirs)."""
    return runs["mix"].ne("") & runs["draft_calls"].gt(0)


def warn_missing_ar(runs: pd.DataFrame) -> None:
    """Warn once per setting and seed that has runs but no AR run (its ratios are NaN).

    Tuning runs (shapes are selected by block efficiency, never by rate) and dial runs that call their draft model
    (dial_drafting: omit_dial_speed drops their rates) have no AR run by design and are not warned about.
    """
    by_design = runs["selection_role"].eq("tune") | dial_drafting(runs)
    for keys, group in runs[runs["ar_token_rate"].isna() & ~by_design].groupby(list(AR_KEYS), dropna=False):
        setting = ", ".join(f"{k}={v}" for k, v in zip(AR_KEYS, keys))
        log.warning("no AR run for %s: token-rate and accuracy ratios of its %d run(s) are NaN", setting, len(group))


def add_ratios(runs: pd.DataFrame, prompts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Add token_rate_ratio, decode_token_rate_ratio and accuracy_ratio (to the matching AR run) to both tables."""
    runs = runs.merge(ar_baselines(runs), on=list(AR_KEYS), how="left")
    warn_missing_ar(runs)
    base = ["ar_token_rate", "ar_decode_token_rate", "ar_accuracy"]
    prompts = prompts.merge(runs[["run_dir", *base]], on="run_dir", how="left")
    for frame, score in ((runs, "accuracy"), (prompts, "score")):
        frame["token_rate_ratio"] = frame["token_rate"] / frame["ar_token_rate"]
        frame["decode_token_rate_ratio"] = frame["decode_token_rate"] / frame["ar_decode_token_rate"]
        frame["accuracy_ratio"] = frame[score] / frame["ar_accuracy"]
    return runs.drop(columns=base), prompts.drop(columns=base)


def omit_dial_speed(runs: pd.DataFrame, prompts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both tables with SPEED set to NaN for the dial_drafting runs, flagged by `speed_omitted`."""
    omitted = dial_drafting(runs)
    dirs = set(runs.loc[omitted, "run_dir"])
    runs, prompts = runs.assign(speed_omitted=omitted), prompts.assign(speed_omitted=prompts["run_dir"].isin(dirs))
    for frame in (runs, prompts):
        frame.loc[frame["speed_omitted"], list(SPEED)] = NAN
    return runs, prompts


def first_divergence(ids: list[int], reference: list[int]) -> float:
    """The first token position (0-based) where `ids` differs from `reference`; NaN when they are identical.

    A sequence that stops earlier (EOS) diverges at the shorter length.
    """
    for i, (a, b) in enumerate(zip(ids, reference)):
        if a != b:
            return float(i)
    return NAN if len(ids) == len(reference) else float(min(len(ids), len(reference)))


def greedy_divergence(runs: pd.DataFrame, prompts: pd.DataFrame, tokens: Mapping[str, Mapping[Any, list[int]]]
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Greedy runs vs the AR run of the same setting and seed, prompt by prompt (issue 12: in half precision a
    verify pass over k tokens rounds differently from k one-token passes, so greedy identity holds only in float32).

    Prompts gain `greedy_divergence` (first differing position, NaN if identical or not checked) and
    `greedy_checked`; runs gain `greedy_prompts` (checked), `greedy_diverged` (prompts that differ) and
    `greedy_first_divergence` (earliest position over its prompts, NaN if none differs).
    """
    ar_dirs = {tuple(row[k] for k in AR_KEYS): row["run_dir"] for _, row in runs[runs["method"] == "ar"].iterrows()}
    div, checked = [], []
    for _, row in prompts.iterrows():
        ar_dir = ar_dirs.get(tuple(row[k] for k in AR_KEYS))
        ours = tokens[row["run_dir"]].get(row["prompt_id"])
        ref = tokens[ar_dir].get(row["prompt_id"]) if ar_dir else None
        ok = (is_greedy(row) and row["method"] != "ar" and ours is not None and ref is not None)
        checked.append(ok)
        div.append(first_divergence(ours, ref) if ok else NAN)
    prompts = prompts.assign(greedy_divergence=div, greedy_checked=checked)
    per_run = prompts[prompts["greedy_checked"]].groupby("run_dir").agg(
        greedy_prompts=("prompt_id", "size"), greedy_diverged=("greedy_divergence", "count"),
        greedy_first_divergence=("greedy_divergence", "min"))
    runs = runs.merge(per_run, left_on="run_dir", right_index=True, how="left")
    runs[["greedy_prompts", "greedy_diverged"]] = runs[["greedy_prompts", "greedy_diverged"]].fillna(0).astype(int)
    return runs, prompts


def add_standard_errors(runs: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """`<metric>_se` per SE_METRICS: standard error over the run's prompts (NaN with fewer than two finite values)."""
    def se(values: pd.Series) -> float:
        finite = values[np.isfinite(values.to_numpy(float))]
        return float(finite.std(ddof=1) / np.sqrt(len(finite))) if len(finite) > 1 else NAN

    errors = prompts.groupby("run_dir")[list(SE_METRICS)].agg(se).add_suffix("_se")
    return runs.merge(errors, left_on="run_dir", right_index=True, how="left")


def tidy(frame: pd.DataFrame, first: Iterable[str]) -> pd.DataFrame:
    """`first` columns first, x as a nullable integer, rows in a stable order."""
    first = list(first)
    frame = frame[first + [c for c in frame.columns if c not in first]].astype({"x": "Int64"})
    order = [c for c in (*SETTING, "budget", "x", "method", "shape_tag", "seed", "prompt_id", "step") if c in frame]
    return frame.sort_values(order, na_position="first", kind="stable").reset_index(drop=True)


def read_run(run_dir: Path) -> tuple[dict, list[dict], pd.DataFrame, dict]:
    """One complete run's row, prompt rows, step frame and {prompt_id: token ids}; Unreadable (naming the file and
    the reason) unless rsd.harness.store.summary_problem accepts the run."""
    summary, why = summary_problem(run_dir)
    if summary is None:
        raise Unreadable(why or f"{run_dir}: incomplete run (no summary.json)")
    records, _ = scan_records(run_dir / "records.jsonl")  # valid and one per prompt: summary_problem checked them
    try:
        keys = run_keys(run_dir, summary)
        row = run_row(run_dir, summary, records)
        prompts = [prompt_row(keys, r, summary["draft_params"], summary["target_params"]) for r in records]
        steps = step_frame(keys, records)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as err:
        raise Unreadable(f"{run_dir / 'summary.json'}: {type(err).__name__}: {err}") from err
    return row, prompts, steps, {r["prompt_id"]: r.get("new_token_ids") for r in records}


def load(roots: Iterable[Path | str]) -> Tables:
    """The run, prompt and step tables of every complete run under `roots`; ValueError if there is none.

    Every other run directory is left out, named in a warning and in `Tables.skipped` (see the module docstring).
    """
    roots = list(roots)
    runs, prompts, steps, tokens, skipped = [], [], [], {}, []
    for run_dir in find_run_dirs(roots):
        try:
            row, prompt_rows, step_rows, ids = read_run(run_dir)
        except Unreadable as err:
            skipped.append(str(err))
            log.warning("skipping %s", err)
            continue
        runs.append(row)
        prompts += prompt_rows
        steps.append(step_rows)
        tokens[str(run_dir)] = ids
    if not runs:
        raise ValueError(f"no complete run (a directory with run.json and a summary.json agreeing with its records) "
                         f"under {', '.join(map(str, roots))} ({len(skipped)} skipped)")
    run_table, prompt_table = omit_dial_speed(*add_ratios(pd.DataFrame(runs), pd.DataFrame(prompts)))
    run_table, prompt_table = greedy_divergence(run_table, prompt_table, tokens)
    run_table = add_standard_errors(run_table, prompt_table)
    return Tables(tidy(run_table, RUN_KEYS), tidy(prompt_table, [*RUN_KEYS, "prompt_id"]),
                  tidy(pd.concat(steps, ignore_index=True), RUN_KEYS), skipped)
