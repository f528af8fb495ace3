"""Feature-conditioned drafting: a draft head that reads the target's hidden states runs every drafter losslessly,
reads exactly the features of its context (the exact oracle's table head refuses anything else), and drafts in the
engine exactly the laws it is trained on (teacher-forced)."""

import pytest
import torch

from rsd.certify.exact_engine import ContextTables, TableHeadLM, engine_law, target_law, total_variation
from rsd.core.engine import Engine
from rsd.core.generation import Generation
from rsd.core.plugin import PluginError
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import AR, BV, RSDC, RSDS, SD, TV, Eagle2, SpecInfer, SpecTr
from rsd.models.adapter import CausalLM
from rsd.models.feature_head.unrolled import unrolled_outputs
from rsd.models.feature_head.weights import tiny_head_lm
from rsd.models.tiny import tiny_pair

T1 = SamplingParams(1.0)
DRAFTERS = {
    "sd": lambda: SD(2), "bv": lambda: BV(2), "specinfer": lambda: SpecInfer(2, 2), "spectr": lambda: SpecTr(2, 2),
    "rsd_c": lambda: RSDC([2, 1]), "tv": lambda: TV([2, 1]), "rsd_s": lambda: RSDS(2, 2),
    "eagle2": lambda: Eagle2(2, 2, 3),
}


def table_law(drafter, tables: ContextTables, engine_cls=Engine, new_tokens: int = 3, eos=()) -> dict:
    def make(target, _):
        return engine_cls(target, TableHeadLM(tables), drafter, T1, list(eos), tables.vocab)

    return engine_law(make, tables, [0], new_tokens)


FAST = ("sd", "rsd_c", "eagle2")  # the other drafters' enumerations take minutes: slow tier (certify runs them all)


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST else pytest.mark.slow)
                                  for n in sorted(DRAFTERS)])
@pytest.mark.parametrize("kind", ["close", "sparse"])
def test_exact_oracle_with_a_feature_head(name, kind):
    """The engine's exact emitted law equals the target's with a feature-head draft, and the table head (which
    raises on a feature of the wrong context) accepts every feature the engine hands over."""
    tables = ContextTables(3, 1, kind)
    law = table_law(DRAFTERS[name](), tables)
    assert total_variation(law, target_law(tables, T1, [0], 3, frozenset())) < 1e-9


@pytest.mark.slow
def test_exact_oracle_with_eos_and_a_feature_head():
    tables = ContextTables(3, 2, "close")
    law = table_law(RSDS(2, 2), tables, new_tokens=4, eos=(2,))
    assert total_variation(law, target_law(tables, T1, [0], 4, frozenset({2}))) < 1e-9


class RejectedNodeFeatures(Engine):
    """A planted bug: hands the draft the feature of the last tree node (usually a rejected one) for the root."""

    def _hand_over_features(self, tree, path, ctx):
        super()._hand_over_features(tree, path, ctx)
        if len(tree) > 1 and self.pending is not None:
            self.pending = self.pending.clone()
            self.pending[0] = self.target.features[-1]


class ShiftedFeatures(Engine):
    """A planted bug: the feature of position i goes with token i instead of token i + 1."""

    def _hand_over_features(self, tree, path, ctx):
        super()._hand_over_features(tree, path, ctx)
        feats = self.target.features[-len(tree):]
        self.pending = feats[torch.tensor([*path, path[-1] if path else 0])]


@pytest.mark.parametrize("engine_cls", [RejectedNodeFeatures, ShiftedFeatures])
def test_the_oracle_refuses_a_head_fed_the_wrong_features(engine_cls):
    """Both bugs keep the method lossless; the table head is what makes them an error."""
    with pytest.raises((AssertionError, PluginError), match="read the feature of context"):
        table_law(RSDC([2, 1]), ContextTables(3, 1, "close"), engine_cls, new_tokens=5)


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_greedy_identity_with_a_feature_head(name):
    target, _ = tiny_pair("llama", 64, seed=5)
    greedy = SamplingParams(0.0)
    ar = Engine(CausalLM(target), None, AR(), greedy, [], 64)
    engine = Engine(CausalLM(target), tiny_head_lm(target, seed=1), DRAFTERS[name](), greedy, [], 64)
    for i, prompt in enumerate([[1, 2, 3], [40, 41, 42, 43, 44, 45]]):
        want = ar.generate(prompt, 24, prompt_generator(0, str(i))).new_token_ids
        assert engine.generate(prompt, 24, prompt_generator(0, str(i))).new_token_ids == want


def test_in_engine_laws_equal_the_teacher_forced_laws():
    """The head's law at every step's root, and at the first drafted node when the target accepted it, equals its
    teacher-forced law on the emitted sequence (training's unrolled steps 1 and 2): a feature fed at the wrong
    position, or a stale head cache after a rejection, breaks this equality while staying lossless."""
    target, _ = tiny_pair("llama", 64, seed=7, init_std=0.2)
    head = tiny_head_lm(target, seed=3)
    engine = Engine(CausalLM(target), head, SD(3), T1, [], 64)
    prompt = [5, 6, 7, 8]
    committed, roots, firsts = list(prompt), [], []
    engine.reset()
    engine._prefill(committed, Generation())
    gen = prompt_generator(0, "tf")
    for _ in range(8):
        step = engine.step(committed, gen, Generation())
        roots.append((len(committed) - 1, step.tree.draft_probs[0]))
        if step.path and 1 in step.tree.draft_probs:
            firsts.append((len(committed), step.tree.draft_probs[1]))
        committed += step.emitted
    ids = torch.tensor(committed)
    with torch.no_grad():
        feats = target.model(input_ids=ids[None]).last_hidden_state[0]
        batch = {"ids": ids, "positions": torch.arange(len(ids)), "seq": torch.zeros(len(ids), dtype=torch.long),
                 "prev": torch.cat([torch.zeros_like(feats[:1]), feats[:-1]])}
        outs = unrolled_outputs(head.head, head.embed, batch, 2)
        laws = [torch.softmax(head.logits(h), -1) for h in outs]
    assert firsts, "no step accepted its first drafted token: pick a seed that does"
    for pos, law in roots:
        torch.testing.assert_close(law, laws[0][pos], atol=1e-5, rtol=1e-4)
    for pos, law in firsts:
        torch.testing.assert_close(law, laws[1][pos], atol=1e-5, rtol=1e-4)


def test_head_counts_only_its_own_parameters():
    target, _ = tiny_pair("llama", 64, seed=5)
    head = tiny_head_lm(target, seed=1)
    assert head.num_params == sum(p.numel() for p in head.head.parameters())
    assert head.num_params < sum(p.numel() for p in target.parameters())


def test_the_guide_section_runs_as_written(capsys):
    """docs/adding_a_drafter.md §5's code block runs literally."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "adding_a_drafter.md").read_text(encoding="utf-8")
    section = text.split("## 5. A draft model that reads the target's features", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "adding_a_drafter.md#5", "exec"), {})
    assert "tokens in" in capsys.readouterr().out
