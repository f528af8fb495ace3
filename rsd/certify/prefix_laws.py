"""Exact sequence laws on a tiny vocabulary (docs/algorithms.md#oracles): a model pair's laws per prefix, the methods'
tree drafting on them, drafting plus verification against the target's joint law, and a real target's exact law."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rsd.certify.outcomes import enumerate_outcomes
from rsd.core.coins import Coins
from rsd.core.rules import NodeRule
from rsd.core.tree import DraftTree
from rsd.verify.base import Verifier

LAW_KINDS = ("random", "sparse", "onehot", "disjoint")


class PrefixLaws:
    """A tiny 'model pair': a target law q(.|s) and a draft law p(.|s) for every prefix s, random per prefix.

    Kinds: 'random' (peaked softmaxes), 'sparse' (the draft keeps 2 tokens, the target loses one: top-k/top-p
    masks), 'onehot' (greedy: one-hot laws, equal half the time), 'disjoint' (q and p on disjoint supports).
    """

    def __init__(self, vocab: int, seed: int, kind: str = "random") -> None:
        if kind not in LAW_KINDS:
            raise ValueError(f"unknown law kind {kind!r}; known: {LAW_KINDS}")
        self.vocab, self.seed, self.kind = vocab, seed, kind
        self._cache: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def laws(self, prefix: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(q, p) after `prefix`, float64."""
        if prefix not in self._cache:
            gen = torch.Generator().manual_seed(hash((self.seed, LAW_KINDS.index(self.kind), prefix)) & ((1 << 62) - 1))
            v = self.vocab
            q = torch.softmax(2.0 * torch.randn(v, generator=gen, dtype=torch.float64), -1)
            p = torch.softmax(2.0 * torch.randn(v, generator=gen, dtype=torch.float64), -1)
            perm = torch.randperm(v, generator=gen)
            if self.kind == "sparse":
                p[perm[2:]] = 0
                q[perm[-1]] = 0
            elif self.kind == "onehot":
                q, p = torch.zeros(v, dtype=torch.float64), torch.zeros(v, dtype=torch.float64)
                q[perm[0]] = 1
                p[perm[0] if torch.rand(1, generator=gen) < 0.5 else perm[1]] = 1
            elif self.kind == "disjoint":
                q[perm[v // 2:]] = 0
                p[perm[: v // 2]] = 0
            self._cache[prefix] = (q / q.sum(), p / p.sum())
        return self._cache[prefix]

    def q(self, prefix: tuple[int, ...]) -> torch.Tensor:
        return self.laws(prefix)[0]

    def p(self, prefix: tuple[int, ...]) -> torch.Tensor:
        return self.laws(prefix)[1]


def _prefix(tree: DraftTree, v: int) -> tuple[int, ...]:
    return tuple(tree.tokens[u] for u in tree.path_to(v))


def _expand(tree: DraftTree, laws: PrefixLaws, v: int) -> torch.Tensor:
    tree.draft_probs[v] = laws.p(_prefix(tree, v))
    return tree.draft_probs[v]


def draft_chain(laws: PrefixLaws, coins: Coins, length: int) -> DraftTree:
    """The SD chain: x_i ~ p(.|x_<i)."""
    tree, v = DraftTree.with_root(0), 0
    for _ in range(length):
        v = tree.add_candidate(v, coins.draw(_expand(tree, laws, v)))
    return tree


def draft_without_replacement(laws: PrefixLaws, coins: Coins, branching: list[int]) -> DraftTree:
    """The RSD-C tree: b_l children per node by sequential draws without replacement, in draw order (the law of
    Gumbel-top-k); fewer where p has fewer tokens."""
    tree, frontier = DraftTree.with_root(0), [0]
    for b in branching:
        nxt = []
        for v in frontier:
            d = _expand(tree, laws, v).clone()
            for _ in range(b):
                if d.sum() <= 0:
                    break
                x = coins.draw(d / d.sum())
                d[x] = 0
                nxt.append(tree.add_candidate(v, x))
        frontier = nxt
    return tree


def draft_iid_trie(laws: PrefixLaws, coins: Coins, k: int, length: int, merge: bool = True) -> DraftTree:
    """K i.i.d. paths of length L; merged into a trie (siblings in first-appearance order, repeats kept as
    candidates) or, with merge=False, kept as separate siblings even when their tokens repeat."""
    tree, at = DraftTree.with_root(0), [0] * k
    for _ in range(length):
        for v in list(dict.fromkeys(at)):
            p = _expand(tree, laws, v)
            for s in [s for s in range(k) if at[s] == v]:
                at[s] = tree.add_candidate(v, coins.draw(p), reuse=merge)
    return tree


def target_rows(tree: DraftTree, laws: PrefixLaws) -> torch.Tensor:
    """q at every node of the tree [len(tree), V]."""
    return torch.stack([laws.q(_prefix(tree, v)) for v in range(len(tree))])


def complete_law(partial: dict[tuple[int, ...], float], laws: PrefixLaws, length: int, eos: frozenset[int]
                 ) -> dict[tuple[int, ...], float]:
    """Extend every sequence by target samples until it has `length` tokens or ends in an EOS."""
    out: dict[tuple[int, ...], float] = {}
    todo = list(partial.items())
    while todo:
        s, w = todo.pop()
        if len(s) >= length or (s and s[-1] in eos):
            out[s] = out.get(s, 0.0) + w
            continue
        q = laws.q(s)
        todo.extend((s + (x,), w * float(q[x])) for x in range(len(q)) if q[x] > 0)
    return out


def tree_law_error(verifier: Verifier, laws: PrefixLaws, draft: Callable[[PrefixLaws, Coins], DraftTree],
                   length: int, rule: str | NodeRule, eos: frozenset[int] = frozenset()) -> float:
    """Total-variation distance between (draft a tree, verify it with the verifier's own code and node rule `rule`,
    complete the emitted tokens with target samples to `length`) and the target's joint law of `length` tokens,
    enumerated exactly."""

    emitted: dict[tuple[int, ...], float] = {}
    for tree, w_tree in enumerate_outcomes(lambda coins: draft(laws, coins)):
        q = target_rows(tree, laws)
        for out, w in enumerate_outcomes(lambda coins, tree=tree, q=q: verifier.verify(tree, q, coins, eos, rule)[1]):
            emitted[tuple(out)] = emitted.get(tuple(out), 0.0) + w_tree * w
    got = complete_law(emitted, laws, length, eos)
    want = complete_law({(): 1.0}, laws, length, eos)
    return 0.5 * sum(abs(got.get(s, 0.0) - want.get(s, 0.0)) for s in set(got) | set(want))


@torch.inference_mode()
def exact_sequence_law(target: torch.nn.Module, prompt: list[int], length: int,
                       probs_fn: Callable[[torch.Tensor], torch.Tensor]) -> dict[tuple[int, ...], float]:
    """P(first `length` generated tokens = s) for every s, from the target's own forward passes (no KV cache)."""
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        prefixes = [s for s, w in law.items() if w > 0]
        ids = torch.tensor([prompt + list(s) for s in prefixes])
        nxt = probs_fn(target(input_ids=ids).logits[:, -1]).double()
        law = {s + (x,): law[s] * float(nxt[i, x]) for i, s in enumerate(prefixes) for x in range(nxt.shape[-1])}
    return law


__all__ = ["LAW_KINDS", "PrefixLaws", "complete_law", "draft_chain", "draft_iid_trie", "draft_without_replacement",
           "exact_sequence_law", "target_rows", "tree_law_error"]
