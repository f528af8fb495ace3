"""The walk's expected_yield and root_acceptance share one computation of the root's acceptance probabilities:
either order of the two calls, on a fresh walk or one that last saw another tree, gives the same values bit for bit."""

from functools import partial

import pytest

from rsd.certify.outcomes import enumerate_outcomes
from rsd.certify.prefix_laws import PrefixLaws, draft_chain, draft_iid_trie, draft_without_replacement, target_rows
from rsd.core.rules import get_rule
from rsd.verify.walk import Walk

DRAFTS = [(partial(draft_chain, length=2), "sd"), (partial(draft_without_replacement, branching=[3, 1]), "rsd"),
          (partial(draft_iid_trie, k=2, length=2), "specinfer")]


def steps(draft, kind):
    """Every drafted tree of `draft` on 4-token prefix laws, with its target rows."""
    laws = PrefixLaws(4, 0, kind)
    return [(tree, target_rows(tree, laws)) for tree, _ in enumerate_outcomes(lambda coins: draft(laws, coins))]


@pytest.mark.parametrize("kind", ["random", "sparse"])
@pytest.mark.parametrize("draft, rule", DRAFTS)
def test_root_acceptance_is_the_same_in_either_order(draft, rule, kind):
    trees = steps(draft, kind)
    yield_first, acceptance_first = Walk(), Walk()
    for tree, q in trees:
        expected = yield_first.expected_yield(tree, q, frozenset(), rule)
        accepted = yield_first.root_acceptance(tree, q, rule)
        assert acceptance_first.root_acceptance(tree, q, rule) == accepted
        assert acceptance_first.expected_yield(tree, q, frozenset(), rule) == expected
        assert Walk().root_acceptance(tree, q, rule) == accepted  # alone, on a fresh walk
    for (tree, q), (other, q_other) in zip(trees, trees[::-1]):  # the latest tree was another one
        value = Walk().root_acceptance(tree, q, rule)
        yield_first.expected_yield(other, q_other, frozenset(), rule)
        assert yield_first.root_acceptance(tree, q, rule) == value


@pytest.mark.parametrize("acceptance_first", [False, True])
def test_the_root_law_is_computed_once_in_either_order(acceptance_first):
    """On one-level trees (only the root has candidates) the two calls evaluate the node rule once between them."""
    calls = []

    def counted(q, p, candidates):
        calls.append(len(candidates))
        return get_rule("rsd")(q, p, candidates)

    for tree, q in steps(partial(draft_without_replacement, branching=[3]), "random"):
        walk, calls[:] = Walk(), []
        if acceptance_first:
            walk.root_acceptance(tree, q, counted)
        walk.expected_yield(tree, q, frozenset(), counted)
        walk.root_acceptance(tree, q, counted)
        assert calls == [len(tree.candidates[0])]
