"""The acceptance dial over a whole generation: its draft law at every step and its parameter count in summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers.config import run_cfg
from helpers.trees import sequential_logits
from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.core.tree import DraftTree
from rsd.drafters import RSDC, SD
from rsd.drafters.base import DraftContext, Drafter
from rsd.harness.runner import run
from rsd.models.adapter import CausalLM
from rsd.models.dial import MixtureLM, mix_logits
from rsd.models.tiny import tiny_pair

VOCAB, MIX = 16, 0.5


def recording(drafter: Drafter) -> tuple[Drafter, list[tuple[list[int], DraftTree]]]:
    """`drafter` whose every build is noted as (committed tokens at that step, the drafted tree)."""
    steps: list[tuple[list[int], DraftTree]] = []
    inner_build = drafter.build

    def build(tree: DraftTree, ctx: DraftContext) -> None:
        inner_build(tree, ctx)
        steps.append((list(ctx.committed), tree))

    drafter.build = build  # type: ignore[method-assign]
    return drafter, steps


def node_context(committed: list[int], tree: DraftTree, v: int) -> list[int]:
    """The tokens a node's draft law conditions on: the committed text, then the drafted tokens down to the node."""
    path = []
    while v != 0:
        path.append(tree.tokens[v])
        v = tree.parents[v]
    return committed + path[::-1]


@pytest.mark.parametrize("make", [lambda: SD(3), lambda: RSDC([2, 2])], ids=["sd", "rsd_c"])
def test_dial_draft_law_is_the_mixture_at_every_step(make) -> None:
    """Every step of a sampled generation (rejections included) drafts from softmax((1 - a) draft + a target) of the
    node's full context: acceptance and block efficiency of a dial run rest on it from step 2 on."""
    target, draft = tiny_pair("llama", VOCAB, seed=2, init_std=0.15)
    drafter, steps = recording(make())
    engine = Engine(CausalLM(target), MixtureLM(CausalLM(draft), CausalLM(target), MIX), drafter,
                    SamplingParams(1.0), [], VOCAB)
    out = engine.generate([3, 4, 5], 24, prompt_generator(0, "dial"))
    assert len(steps) >= 4 and any(a < t for a, t in zip(out.accepted_lengths, out.tokens_verified))  # rejections
    for committed, tree in steps:
        for v, law in tree.draft_probs.items():
            ids = node_context(committed, tree, v)
            want = torch.softmax(mix_logits(sequential_logits(draft, ids)[None].float(),
                                            sequential_logits(target, ids)[None].float(), MIX)[0, :VOCAB], -1)
            torch.testing.assert_close(law.float(), want, atol=1e-4, rtol=0)


def test_dial_summary_counts_the_target_copy_in_the_draft_params(tmp_path: Path) -> None:
    """A dial draft forward also runs the target, so summary.json's draft_params is draft + target parameters."""
    target, draft = tiny_pair("llama", 258)  # the tiny_llama pair's models (vocab_size 258 for the byte tokenizer)
    n_target, n_draft = (sum(p.numel() for p in m.parameters()) for m in (target, draft))
    [summary] = run(run_cfg("drafter=sd", "model_pair=tiny_llama_dial", "budget.draft_length=2",
                            "dataset.num_prompts=1", "sampling.max_new_tokens=4", f"out_dir={tmp_path}"))
    stored = json.loads((Path(summary["run_dir"]) / "summary.json").read_text())
    assert stored["target_params"] == n_target
    assert stored["draft_params"] == summary["draft_params"] == n_draft + n_target
