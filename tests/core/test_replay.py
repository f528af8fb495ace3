"""Engine.replay (docs/algorithms.md#shared-contexts): after each step it commits the reference's token, and the next
step then sees exactly the caches (and, for a feature head, the features) a fresh engine has at that context."""

import pytest
import torch

from rsd.certify.exact_engine import ContextTables, TableHeadLM, TableLM
from rsd.core.engine import Engine
from rsd.core.generation import Generation
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import AR, RSDC, SD, Eagle2, SpecInfer, SpecTr
from rsd.models.adapter import CausalLM
from rsd.models.tiny import tiny_pair

T1 = SamplingParams(1.0)
DRAFTERS = {"sd": lambda: SD(3), "spectr": lambda: SpecTr(2, 3), "rsd_c": lambda: RSDC([2, 1]),
            "eagle2": lambda: Eagle2(2, 3, 5)}


class Capturing(Engine):
    """Keeps each step's root laws: the target's q[0] and the draft's law at the root, both functions of the context
    alone."""

    def step(self, committed, gen, out, max_depth=None, coins=None, draws=None, commit=None):
        step = super().step(committed, gen, out, max_depth, coins, draws, commit)
        self.roots.append((step.q[0].clone(), step.tree.draft_probs[0].clone()))
        if hasattr(self, "trees"):
            self.trees.append((list(step.tree.tokens), list(step.tree.parents)))
        return step


def fresh_roots(make, prompt: list[int], reference: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The root laws of one step at each context prompt + reference[:i], each from a new sequence."""
    roots = []
    for i in range(len(reference)):
        engine = make()
        context, out = prompt + reference[:i], Generation()
        engine.reset()
        engine._prefill(context, out)
        engine.roots = []
        engine.step(context, prompt_generator(0, str(i)), out)
        roots.append(engine.roots[0])
    return roots


def check_replay(make, prompt: list[int], reference: list[int], atol: float) -> None:
    engine = make()
    engine.roots = []
    out = engine.replay(prompt, reference, prompt_generator(0, "draws"), prompt_generator(0, "coins"))
    assert out.new_token_ids == reference
    assert out.target_calls == len(reference) == len(out.expected_emitted) == len(out.accepted_lengths)
    for (q, p), (q0, p0) in zip(engine.roots, fresh_roots(make, prompt, reference), strict=True):
        torch.testing.assert_close(q, q0, atol=atol, rtol=0)
        torch.testing.assert_close(p, p0, atol=atol, rtol=0)


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_replay_leaves_a_fresh_engines_caches(name):
    """A reference the draft did not propose (random tokens): every step's root laws equal a fresh engine's."""
    target, draft = tiny_pair("llama", 32, seed=3, init_std=0.15)
    reference = torch.randint(0, 32, (7,), generator=torch.Generator().manual_seed(1)).tolist()
    check_replay(lambda: Capturing(CausalLM(target), CausalLM(draft), DRAFTERS[name](), T1, [], 32), [4, 5, 6],
                 reference, 1e-5)


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_replay_hands_a_feature_head_its_contexts_features(name):
    """The table head raises on any feature not of its entry's context: replay hands over exactly the right ones."""
    tables = ContextTables(4, 1, "close")
    check_replay(lambda: Capturing(TableLM(tables, 0), TableHeadLM(tables), DRAFTERS[name](), T1, [], 4), [0],
                 [2, 0, 3, 3, 1], 1e-12)


def test_replay_with_ar_yields_one_token_per_context():
    target, _ = tiny_pair("llama", 32, seed=3)
    out = Engine(CausalLM(target), None, AR(), T1, [], 32).replay([1, 2], [5, 6, 7], prompt_generator(0, "d"),
                                                              prompt_generator(0, "c"))
    assert out.expected_emitted == [1.0, 1.0, 1.0] and out.accepted_lengths == [0, 0, 0]


def test_drafters_that_draft_alike_replay_the_same_trees():
    """SpecInfer and SpecTr draw their K chains alike: from one draws seed they verify identical trees at every
    context, whatever their verifiers' coins consumed (the pairing that makes their difference a verifier's)."""
    target, draft = tiny_pair("llama", 32, seed=3, init_std=0.15)
    trees = {}
    for name, make in (("specinfer", lambda: SpecInfer(2, 3)), ("spectr", lambda: SpecTr(2, 3))):
        engine = Capturing(CausalLM(target), CausalLM(draft), make(), T1, [], 32)
        engine.roots, engine.trees = [], []
        engine.replay([4, 5, 6], [1, 2, 3, 4, 5], prompt_generator(0, "draws"), prompt_generator(0, name))
        trees[name] = engine.trees
    assert trees["specinfer"] == trees["spectr"] and len(trees["spectr"]) == 5
