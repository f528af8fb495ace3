"""Shared test helpers: the composed Hydra config, synthetic run directories and records, tiny-model tree forwards,
planted verifier bugs."""

import copy
import functools
import json
from pathlib import Path

import pandas as pd
import torch
from hydra import compose, initialize_config_dir

from rsd.config import RunConfig, resolve_config
from rsd.engine import tree_inputs
from rsd.models.adapter import CausalLM
from rsd.paths import CONF_DIR
from rsd.records import Record, Summary
from rsd.store import file_sha256
from rsd.tree import DraftTree
from rsd.verify import get_verifier
from rsd.verify.traversal import Traversal, TraversalState

CONF = CONF_DIR
ROOT = CONF.parent


@functools.cache
def _composed(overrides: tuple[str, ...]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def compose_cfg(*overrides: str):
    """The resolved config `python run.py OVERRIDES` would see: Hydra composes each override list once per test
    process (the presets' jobs recur across the config, docs and store tests); every call gets its own copy."""
    return copy.deepcopy(_composed(overrides))


def run_cfg(*overrides: str) -> RunConfig:
    """The typed, checked config `python run.py OVERRIDES` runs (rsd.config.resolve_config of `compose_cfg`)."""
    return resolve_config(compose_cfg(*overrides))


# ------------------------------------------------------------------------ synthetic run directories (analysis, store)
TARGET, DRAFT = 1000, 100  # r = 0.1
HOT = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 8}
TAG = {"fixed_length": "L", "fixed_compute": "B"}


def record(pid: str, accepted: list[int], wall: float, score: float, drafts_per_step: int, depth: int) -> dict:
    """A prompt record whose step k emits accepted[k] + 1 tokens; time split 1/4 draft, 1/2 target, 1/4 other. In
    the version-1 layout (no decode phase, expected yields or root optimum: a test adds those it needs)."""
    calls = len(accepted)
    return Record.build(prompt_id=pid, prompt_tokens=5, new_token_ids=[7] * (sum(accepted) + calls), text="",
                        target_calls=calls, draft_calls=drafts_per_step * calls, tokens_verified=[depth * 2] * calls,
                        accepted_lengths=accepted, wall_s=wall, time_draft_s=wall / 4, time_target_s=wall / 2,
                        time_other_s=wall / 4, draft_length=depth, score=score, schema_version=1).to_json()


def write_run(root: Path, name: str, method: str, shape: dict, tag: str, budget: str | None, x: int | None,
              records: list[dict], accuracy: float, sampling: dict = HOT, complete: bool = True,
              extra: dict | None = None, pair: dict | None = None, draft_params: int = DRAFT) -> Path:
    """A run directory as rsd.execute.execute leaves it (summary.json only if `complete`; `extra` joins the summary;
    `pair`: the config's model_pair, named in the summary, default pairA without one; AR has 0 draft params)."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    budget_cfg = None if budget is None else {
        "kind": budget, "draft_length": x if budget == "fixed_length" else None,
        "target_tokens": x if budget == "fixed_compute" else 6}
    stored_pair = {"model_pair": {"target": "tiny:llama", **pair}} if pair else {}  # a full block, as a run stores
    config = {"budget": budget_cfg, "sampling": sampling, "seed": 0, **stored_pair}
    (run_dir / "run.json").write_text(json.dumps({"config": config, "method": method, "shape": shape}))
    (run_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if complete:
        draft_params = draft_params if budget else 0
        summary = Summary.build(
            method=method, shape=shape, shape_tag=tag, draft_length=records[0]["draft_length"],
            tree_size=2 * records[0]["draft_length"], budget=budget,
            budget_value="-" if budget is None else TAG[budget] + str(x), model_pair=pair["name"] if pair else "pairA",
            dataset="dolly_builtin", task="instruction", sampling=sampling, seed=0, target_params=TARGET,
            draft_params=draft_params, records=records, accuracy=accuracy, run_dir=str(run_dir), config=config,
            records_sha256=file_sha256(run_dir / "records.jsonl"), extra=extra)
        (run_dir / "summary.json").write_text(json.dumps(summary.to_json()))
    return run_dir


def one(frame: pd.DataFrame, **keys) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for key, value in keys.items():
        mask &= frame[key].eq(value).fillna(False).astype(bool)
    rows = frame[mask]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def section(markdown: str, *needles: str) -> str:
    """The one table (heading to next heading) whose heading line contains every needle."""
    [found] = [part for part in markdown.split("### ") if all(n in part.split("\n")[0] for n in needles)]
    return found



# ---------------------------------------------------------------------------------- planted verifier bugs
def traversal_with(**methods):
    """A Traversal whose state has some methods replaced (a planted bug)."""
    state = type("BuggyState", (TraversalState,), methods)
    return type("BuggyTraversal", (Traversal,), {"state_cls": state})()



# ---------------------------------------------------------------------- tree forwards on tiny models
VOCAB = 64


def branching_tree(root: int) -> DraftTree:
    """Depth 3, branching (3, 2, 1) with some repeated tokens across branches."""
    tree = DraftTree.with_root(root)
    gen = torch.Generator().manual_seed(1)
    level = [0]
    for b in (3, 2, 1):
        nxt = []
        for v in level:
            for _ in range(b):
                nxt.append(tree.add_candidate(v, int(torch.randint(VOCAB, (1,), generator=gen))))
        level = nxt
    return tree


def sequential_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0, -1]


def tree_call_logits(lm: CausalLM, prompt: list[int], tree) -> torch.Tensor:
    """Logits at every tree node from one tree forward after a first call that caches part of the prompt (so the tree
    call also covers uncached committed tokens), as the engine's step does."""
    lm.reset()
    lm.forward(torch.tensor(prompt[:2]), torch.arange(2), torch.ones(2, 2, dtype=torch.bool).tril())
    tokens, positions, attend = tree_inputs(tree, prompt, lm.cached_len)
    return lm.forward(tokens, positions, attend)[len(prompt) - 2 - 1:]



# ------------------------------------------------------------------------------------------- configs
def representative_jobs(jobs: list[list[str]]) -> list[list[str]]:
    """Jobs covering every drafter x budget combination (what validation depends on) and every other value once."""
    chosen = {}
    for job in jobs:
        chosen.setdefault(tuple(o for o in job if o.startswith(("drafter", "budget"))), job)
    covered = {o for job in chosen.values() for o in job}
    for job in jobs:
        if set(job) - covered:
            chosen[tuple(job)] = job
            covered |= set(job)
    return list(chosen.values())


def expected_yields(tree: DraftTree, q: torch.Tensor, rule: str,
                    specs: tuple[str, ...] = ("walk", "block", "traversal"), eos: frozenset[int] = frozenset()
                    ) -> dict[str, float]:
    """The exact expected tokens of one step under several verifiers on the SAME tree (a paired comparison without
    sampling noise, e.g. block vs the SD walk on a chain, traversal vs the RSD walk on an RSD-C tree). The walk uses
    node rule `rule`; a verifier that cannot verify this tree (block on a branching tree) is left out."""
    out = {}
    for spec in specs:
        try:
            out[spec] = get_verifier(spec).expected_yield(tree, q, eos, rule)
        except ValueError:
            continue
    return out
