"""Tree-level exact enumeration (docs/algorithms.md#oracles) driving the engine's own verification code: every verifier
is exact on the trees it is offered for, and every bug listed in §9 (and the §7 pitfalls 1-2) fails the same oracle."""

from functools import partial

import pytest
import torch

import rsd.certify.outcomes
import rsd.core.rules
import rsd.verify.walk
from helpers.config import run_cfg
from helpers.trees import traversal_with
from rsd.certify.outcomes import enumerate_outcomes, node_output_law
from rsd.certify.prefix_laws import (
    LAW_KINDS,
    PrefixLaws,
    draft_chain,
    draft_iid_trie,
    draft_without_replacement,
    target_rows,
    tree_law_error,
)
from rsd.core.rules import NodeLaw, get_rule, verify_node
from rsd.drafters import BV, RSDS, SD, TV, SpecInfer
from rsd.errors import ConfigError
from rsd.harness.runs import plan_runs
from rsd.verify import RandomCoins, get_verifier, verifier_for
from rsd.verify.block import Block
from rsd.verify.traversal import Traversal

EXACT = 1e-12
CHAIN2, CHAIN3 = partial(draft_chain, length=2), partial(draft_chain, length=3)
RSDC22, RSDC31 = partial(draft_without_replacement, branching=[2, 2]), partial(draft_without_replacement,
                                                                                 branching=[3, 1])
TRIE22 = partial(draft_iid_trie, k=2, length=2)


def depth(draft) -> int:
    kw = draft.keywords
    return kw["length"] if "length" in kw else len(kw["branching"])


def worst_tv(verifier, draft, rule, vocab=3, seeds=(0, 1, 2), kinds=LAW_KINDS, eos=frozenset()) -> float:
    return max(tree_law_error(verifier, PrefixLaws(vocab, seed, kind), draft, depth(draft) + 1, rule, eos)
               for kind in kinds for seed in seeds)


# --- exactness --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("verifier,draft,rule", [
    ("walk", CHAIN3, "sd"), ("block", CHAIN2, "sd"), ("block", CHAIN3, "sd"),
    ("walk", RSDC22, "rsd"), ("traversal", RSDC22, "rsd"), ("traversal", RSDC31, "rsd"),
    ("walk", TRIE22, "specinfer"), ("traversal", TRIE22, "specinfer"),
])
def test_verifier_is_exact_on_enumerated_trees(verifier, draft, rule):
    """Peaked, truncated, one-hot (greedy) and disjoint-support laws; vocabulary 3, depth 2-3."""
    assert worst_tv(get_verifier(verifier), draft, rule) <= EXACT


@pytest.mark.parametrize("verifier,draft,rule", [("walk", RSDC22, "rsd"), ("block", CHAIN3, "sd"),
                                                 ("traversal", RSDC22, "rsd"), ("traversal", TRIE22, "specinfer")])
def test_verifier_is_exact_with_eos(verifier, draft, rule):
    """An emitted EOS ends the step: the law of sequences cut at EOS is still the target's."""
    assert worst_tv(get_verifier(verifier), draft, rule, kinds=("random", "sparse"), eos=frozenset({0})) <= EXACT


@pytest.mark.slow
@pytest.mark.parametrize("verifier,draft,rule,vocab", [
    ("traversal", partial(draft_without_replacement, branching=[3, 1, 1]), "rsd", 3),
    ("traversal", RSDC22, "rsd", 4), ("traversal", partial(draft_iid_trie, k=3, length=2), "specinfer", 3),
    ("traversal", partial(draft_iid_trie, k=2, length=3), "specinfer", 3), ("block", CHAIN3, "sd", 4),
    ("walk", partial(draft_without_replacement, branching=[2, 1, 1]), "rsd", 3),
])
def test_verifier_is_exact_on_larger_trees(verifier, draft, rule, vocab):
    assert worst_tv(get_verifier(verifier), draft, rule, vocab=vocab, seeds=(0,), kinds=("random", "sparse")) <= EXACT


def test_traversal_equals_block_on_a_chain():
    """§9: on a chain Traversal verification is Block verification (same outcomes, same probabilities)."""
    for seed in range(3):
        laws = PrefixLaws(3, seed)
        for tree, _ in enumerate_outcomes(lambda coins, laws=laws: draft_chain(laws, coins, 3)):
            q = target_rows(tree, laws)
            laws_of = {}
            for name in ("block", "traversal"):
                verifier = get_verifier(name)
                out = enumerate_outcomes(lambda c, v=verifier, t=tree, q=q: tuple(v.verify(t, q, c, {})[1]))
                law = {}
                for s, w in out:
                    law[s] = law.get(s, 0.0) + w
                laws_of[name] = law
            keys = set(laws_of["block"]) | set(laws_of["traversal"])
            assert max(abs(laws_of["block"].get(s, 0) - laws_of["traversal"].get(s, 0)) for s in keys) < 1e-14


# --- the oracle can fail: §9's bugs and §7's pitfalls ------------------------------------------------------------

def fails(verifier, drafts, rule, vocab=3, seeds=(0, 1, 2), kinds=("random",)) -> bool:
    """True as soon as one case is off the target's law by TV > 1e-3 (every planted bug must reach that)."""
    return any(tree_law_error(verifier, PrefixLaws(vocab, seed, kind), d, depth(d) + 1, rule)
               for d in drafts for kind in kinds for seed in seeds)


class ResidualWithQ(Block):
    """Block bug: the residual with q instead of a_tau * q."""

    def final_law(self, tree, q, nodes, a, tau):
        return super().final_law(tree, q, nodes, [1.0] * len(a), tau)


class ZWithPreviousA(Block):
    """Block bug: Z_i computed with a_{i-1}."""

    def weights(self, tree, q, nodes):
        a, h = super().weights(tree, q, nodes)
        for i in range(1, len(nodes) - 1):
            z = float((a[i - 1] * q[nodes[i]] - tree.draft_probs[nodes[i]]).clamp_min(0).sum())
            h[i] = z / (z + 1 - a[i]) if z + 1 - a[i] > 0 else 1.0
        return a, h


class EarlyStop(Block):
    """Block bug: scan i = 1..L and stop at the first failure."""

    def choose(self, h, coins):
        tau = 0
        for i in range(1, len(h)):
            if not coins.accept(h[i]):
                break
            tau = i
        return tau


class HIsA(Block):
    """Block bug: h_i = a_i."""

    def weights(self, tree, q, nodes):
        a, h = super().weights(tree, q, nodes)
        return a, [0.0] + a[1:]


@pytest.mark.parametrize("bug", [ResidualWithQ, ZWithPreviousA, EarlyStop, HIsA])
def test_block_bugs_fail_the_oracle(bug):
    assert fails(bug(), [CHAIN2, CHAIN3], "sd")


def _residual_after_removal(self, a):
    b, t = self.tree.parents[a], self.tree.tokens[a]
    self.remove(b, t)
    self.update_parent(b, self.residual(b))
    self.kids[b] = [c for c in self.kids[b] if c != a]
    self.recompute(b)


def _skip_update_without_siblings(self, a):
    b, t = self.tree.parents[a], self.tree.tokens[a]
    if len(self.kids[b]) > 1:
        self.update_parent(b, self.residual(b))
    self.remove(b, t)
    self.kids[b] = [c for c in self.kids[b] if c != a]
    self.recompute(b)


def _no_recompute(self, a):
    b, t = self.tree.parents[a], self.tree.tokens[a]
    self.update_parent(b, self.residual(b))
    self.remove(b, t)
    self.kids[b] = [c for c in self.kids[b] if c != a]
    for c in self.kids[b]:  # only b's own children, not their descendants
        x = self.tree.tokens[c]
        self.w[c] = min(self.w[b] * float(self.row(b)[x]) / float(self.P[b][x]), 1.0)


def _deepest_leaf(self):
    leaves = [v for v in self.w if not self.kids.get(v) and v != 0 and self._alive(v)]
    return max(leaves, key=lambda v: (self.tree.depths[v], -v)) if leaves else 0


def _alive(self, v):
    while v != 0:
        if v not in self.kids.get(self.tree.parents[v], []):
            return False
        v = self.tree.parents[v]
    return True


def _last_child_first(self):
    v = 0
    while self.kids.get(v):
        v = self.kids[v][-1]
    return v


def _most_probable_child_first(self):
    v = 0
    while self.kids.get(v):
        v = max(self.kids[v], key=lambda c, v=v: float(self.tree.draft_probs[v][self.tree.tokens[c]]))
    return v


TRAVERSAL_BUGS = {
    "rejected child not removed from P": dict(remove=lambda self, b, t: None),
    "residual not scaled by w_b": dict(residual=lambda self, b: (self.row(b) - self.P[b]).clamp_min(0)),
    "residual with the updated P": dict(reject=_residual_after_removal),
    "deepest leaf first": dict(first_leaf=_deepest_leaf, _alive=_alive),
    "no parent update without siblings": dict(reject=_skip_update_without_siblings),
    "extra token from the original row": dict(extra_law=lambda self, a: self.q[a]),
    "descendants' weights not recomputed": dict(reject=_no_recompute),
    "siblings in reverse draw order": dict(first_leaf=_last_child_first),
    "siblings re-sorted by probability": dict(first_leaf=_most_probable_child_first),
}


@pytest.mark.parametrize("bug", sorted(TRAVERSAL_BUGS))
def test_traversal_bugs_fail_the_oracle(bug):
    assert fails(traversal_with(**TRAVERSAL_BUGS[bug]), [RSDC22, RSDC31], "rsd")


def test_traversal_with_draft_update_on_unmerged_iid_children_fails():
    """§9: i.i.d. children kept as separate siblings (duplicates not merged) must not lose tokens from P."""
    unmerged = [partial(draft_iid_trie, k=3, length=1, merge=False),
                partial(draft_iid_trie, k=2, length=2, merge=False)]
    assert fails(get_verifier("traversal"), unmerged, "specinfer", vocab=4, seeds=range(4), kinds=("random", "sparse"))
    merged = [partial(d, merge=True) for d in unmerged]
    assert max(worst_tv(get_verifier("traversal"), d, "specinfer", vocab=4, seeds=range(4), kinds=("random", "sparse"))
               for d in merged) <= EXACT  # the merged trie, same laws: exact


def _token_order(draft):
    """§7 pitfall 2: candidates re-sorted by token id after drafting."""
    def drafted(laws, coins):
        tree = draft(laws, coins)
        for v in tree.candidates:
            tree.candidates[v] = sorted(tree.candidates[v], key=lambda c: tree.tokens[c])
        return tree
    drafted.keywords = draft.keywords
    return drafted


@pytest.mark.parametrize("pitfall", ["fixed p on distinct drafts", "token-id order"])
def test_walk_pitfalls_fail_the_tree_oracle(pitfall):
    draft, rule = (RSDC22, "specinfer") if pitfall.startswith("fixed") else (_token_order(RSDC22), "rsd")
    assert fails(get_verifier("walk"), [draft], rule)


def test_traversal_token_order_fails_the_tree_oracle():
    assert fails(get_verifier("traversal"), [_token_order(RSDC22)], "rsd")


def test_wrong_residual_draw_in_verify_node_fails_both_oracles(monkeypatch):
    """Issue 13: the exact oracles run `verify_node` itself, so a wrong residual draw there is caught exactly."""
    def buggy(rule, q, p, candidates, coins):
        law = get_rule(rule)(q, p, candidates)
        for j, prob in enumerate(law.accept_probs().tolist()):
            if coins.accept(prob):
                return j, int(candidates[j])
        return -1, coins.draw(q)  # the bug: the target row instead of the residual

    q, p = PrefixLaws(5, 0).laws(())
    assert float((node_output_law("rsd", q, p, 2, "without_replacement") - q).abs().max()) <= EXACT
    for module in (rsd.core.rules, rsd.certify.outcomes, rsd.verify.walk):
        monkeypatch.setattr(module, "verify_node", buggy)
    assert float((node_output_law("rsd", q, p, 2, "without_replacement") - q).abs().max())
    assert fails(get_verifier("walk"), [RSDC22], "rsd")


# --- one definition of acceptance -------------------------------------------------------------------------------

class _Always:
    """Coins that accept anything with probability > 0 and record what they were asked."""

    def __init__(self):
        self.asked = []

    def accept(self, prob):
        self.asked.append(prob)
        return prob > 0

    def draw(self, probs):
        return int(probs.argmax())


def test_zero_mass_candidate_is_never_accepted():
    """A user rule giving a candidate num = den = 0: accept_probs says 0, and verify_node rejects it."""
    def user_rule(q, p, candidates):
        return NodeLaw(torch.tensor([0.0, 0.5]), torch.tensor([0.0, 1.0]), q)

    q = torch.tensor([0.2, 0.8])
    assert user_rule(q, q, torch.tensor([0, 1])).accept_probs().tolist() == [0.0, 0.5]
    coins = _Always()
    assert verify_node(user_rule, q, q, torch.tensor([0, 1]), coins) == (1, 1)
    assert coins.asked == [0.0, 0.5]
    gen = torch.Generator().manual_seed(0)
    assert not any(RandomCoins(gen).accept(0.0) for _ in range(1000))  # u ~ U(0, 1]: probability 0 never accepts


# --- drafters, configs and plug-ins -------------------------------------------------------------------------------

def test_bv_and_tv_have_the_shapes_of_sd_and_rsd_c():
    for name, base in (("bv", "sd"), ("tv", "rsd_c")):
        for budget in ("budget=fixed_length budget.draft_length=3", "budget=fixed_compute budget.target_tokens=6"):
            ours = [(p.shape, p.method) for p in plan_runs(run_cfg(f"drafter={name}", *budget.split()))]
            theirs = [p.shape for p in plan_runs(run_cfg(f"drafter={base}", *budget.split()))]
            assert [s for s, _ in ours] == theirs and {m for _, m in ours} == {name}
    assert verifier_for(BV(3)).name == "block" and verifier_for(TV([2, 1])).name == "traversal"


def test_verifier_override_from_yaml():
    [plan] = plan_runs(run_cfg("drafter=specinfer", "+drafter.verifier=traversal"))
    assert plan.method == "specinfer+traversal" and plan.make_drafter().verifier == "traversal"
    assert plan.identity["drafter"]["verifier"] == "traversal"
    [plain] = plan_runs(run_cfg("drafter=specinfer"))
    assert plain.run_dir != plan.run_dir


@pytest.mark.parametrize("drafter,verifier", [("rsd_s", "traversal"), ("sd", "traversal"), ("rsd_c", "block"),
                                              ("spectr", "block")])
def test_verifier_refused_where_not_exact(drafter, verifier):
    with pytest.raises(ConfigError, match=f"drafter.verifier={verifier}"):
        plan_runs(run_cfg(f"drafter={drafter}", f"+drafter.verifier={verifier}"))
    d = RSDS(2, 2) if drafter == "rsd_s" else SD(2)
    d.verifier = "traversal"
    with pytest.raises(ConfigError):
        verifier_for(d)


def test_user_verifier_by_dotted_path():
    [plan] = plan_runs(run_cfg("drafter=rsd_c", "+drafter.verifier=rsd.verify.traversal.Traversal"))
    assert plan.method == "rsd_c+rsd.verify.traversal.Traversal"
    assert isinstance(verifier_for(plan.make_drafter()), Traversal)
    with pytest.raises(ConfigError, match="cannot be imported"):
        plan_runs(run_cfg("drafter=sd", "+drafter.verifier=no_such_pkg.Verifier"))
    with pytest.raises(ConfigError, match="is not a Verifier"):  # a plain callable has no expected yield
        get_verifier("rsd.certify.prefix_laws.draft_chain")


def test_specinfer_trie_with_traversal_runs_in_the_engine():
    from rsd.core.engine import Engine
    from rsd.core.generation import Generation
    from rsd.core.sampling import SamplingParams, prompt_generator
    from rsd.models.adapter import CausalLM
    from rsd.models.tiny import tiny_pair

    target, draft = tiny_pair("llama", 16, seed=2, init_std=0.15)
    d = SpecInfer(3, 3)
    d.verifier = "traversal"
    engine = Engine(CausalLM(target), CausalLM(draft), d, SamplingParams(1.0), [], 16)
    for i in range(20):
        engine.reset()
        step = engine.step([3, 4, 5], prompt_generator(0, str(i)), Generation())
        assert len(step.emitted) == len(step.path) + 1
        assert step.path == (step.tree.path_to(step.path[-1]) if step.path else [])
        assert [step.tree.tokens[v] for v in step.path] == step.emitted[:-1]
