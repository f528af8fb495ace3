"""The exact-enumeration oracle under the drafter's declared candidate scheme: the node rule at one node, and the
drafter's verifier on tiny drafted trees, every draw and coin enumerated."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from rsd.certify.exact import EXACT_BOUND
from rsd.certify.outcomes import node_output_law
from rsd.certify.prefix_laws import (
    LAW_KINDS,
    PrefixLaws,
    draft_chain,
    draft_iid_trie,
    draft_without_replacement,
    tree_law_error,
)
from rsd.certify.report import Check
from rsd.drafters.base import Drafter
from rsd.verify import verifier_for


def random_laws(vocab: int, seed: int, support: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A peaked target q and a different draft p in float64; p optionally restricted to `support` tokens."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.softmax(2.0 * torch.randn(vocab, generator=gen, dtype=torch.float64), -1)
    p = torch.softmax(2.0 * torch.randn(vocab, generator=gen, dtype=torch.float64), -1)
    if support is not None:
        p[p.argsort()[: vocab - support]] = 0
        p = p / p.sum()
    return q, p


def node_exact_error(drafter: Drafter, scheme: str) -> tuple[float, int]:
    """Max |law - q| of one node's output under the drafter's rule, through `verify_node` (the walk's code)."""
    cases = []
    for m in ([1] if scheme == "single" else [1, 2, 3, 4]):
        vocab = 8 if m <= 3 else 6
        for seed in range(3):
            cases.append((m, *random_laws(vocab, seed)))
        cases.append((m, *random_laws(vocab, 100 + m, support=2)))  # fewer draft tokens than candidates
    for hot_q, hot_p in ((0, 0), (0, 1)):  # greedy: one-hot laws, equal and different
        q, p = torch.zeros(5, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)
        q[hot_q], p[hot_p] = 1.0, 1.0
        cases.append((1 if scheme == "single" else 2, q, p))
    worst = max(float((node_output_law(drafter.rule, q, p, m, scheme) - q).abs().max()) for m, q, p in cases)
    return worst, len(cases)


def tree_drafts(scheme: str) -> list[Callable]:
    """Tiny trees (depth 2-3) drafted by the scheme, for the tree-level enumeration."""
    if scheme == "single":
        return [partial(draft_chain, length=2), partial(draft_chain, length=3)]
    if scheme == "without_replacement":
        return [partial(draft_without_replacement, branching=[2, 2]),
                partial(draft_without_replacement, branching=[3, 1])]
    if scheme == "iid":
        return [partial(draft_iid_trie, k=2, length=2)]
    return []


def tree_exact_error(drafter: Drafter, scheme: str, vocab: int = 3) -> tuple[float, int]:
    """Max total-variation distance between the target's joint law and (draft a tiny tree by the scheme, verify it
    with the drafter's verifier, complete with target samples), over law kinds (peaked, truncated, one-hot,
    disjoint supports), seeds, and one case with an EOS token."""
    verifier = verifier_for(drafter)
    worst, cases = 0.0, 0
    for draft in tree_drafts(scheme):
        depth = draft.keywords["length"] if "length" in draft.keywords else len(draft.keywords["branching"])
        for kind, seed, eos in [(k, s, frozenset()) for k in LAW_KINDS for s in (0, 1)] + [("random", 2, {0})]:
            worst = max(worst, tree_law_error(verifier, PrefixLaws(vocab, seed, kind), draft, depth + 1,
                                              drafter.rule, frozenset(eos)))
            cases += 1
    return worst, cases


def exact_check(drafter: Drafter) -> Check:
    """Exact enumeration through the engine's own verification code: every candidate draw and every coin of the
    node rule at one node (walk verifiers), and every drafted tiny tree with every coin of the drafter's verifier."""
    scheme = drafter.candidate_scheme
    if scheme is None:
        return Check("exact enumeration", None, "not applicable: the drafter declares no candidate_scheme "
                     "(the Monte Carlo oracle still covers it)")
    parts, details = [], {"bound": EXACT_BOUND, "scheme": scheme}
    passed = True
    if drafter.verifier == "walk":
        err, n = node_exact_error(drafter, scheme)
        parts.append(f"node: max |law - q| = {err:.2e} ({n} nodes, vocab <= 8, m <= 4)")
        details.update(node_max_abs_error=err, node_cases=n)
        passed &= err <= EXACT_BOUND
    if tree_drafts(scheme):
        err, n = tree_exact_error(drafter, scheme)
        parts.append(f"trees: max TV = {err:.2e} ({n} cases, vocab 3, depth 2-3, verifier {drafter.verifier})")
        details.update(tree_max_tv=err, tree_cases=n)
        passed &= err <= EXACT_BOUND
    return Check("exact enumeration", passed, "; ".join(parts) + f"; bound {EXACT_BOUND:.0e}, scheme {scheme}",
                 details)
