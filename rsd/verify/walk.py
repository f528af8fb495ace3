"""The node-rule walk (docs/algorithms.md#walk): verify the tree from the root, one node's candidates at a time."""

from __future__ import annotations

import torch

from rsd.core.coins import Coins
from rsd.core.rules import NodeRule, get_rule, verify_chain, verify_node
from rsd.core.tree import DraftTree


def single_candidate_chain(tree: DraftTree, v: int, eos: frozenset[int]) -> list[int]:
    """[v, c_1, ..., c_n]: v and the nodes below it while each has exactly one candidate (a chain of SD nodes),
    ending at the first EOS token; [v] when v has several candidates."""
    chain = [v]
    while len(cands := tree.candidates.get(chain[-1], [])) == 1 and (len(chain) == 1 or
                                                                      tree.tokens[chain[-1]] not in eos):
        chain.append(cands[0])
    return chain


class Walk:
    """Applies the drafter's node rule `rule` at each reached node; emits one token per accepted node plus the
    residual or bonus token, and stops after an accepted EOS."""

    name = "walk"
    _root: tuple | None = None  # (tree, q, rule, the root candidates' acceptance probabilities), the latest computed

    def verify(self, tree: DraftTree, q: torch.Tensor, coins: Coins, eos: frozenset[int], rule: str | NodeRule
               ) -> tuple[list[int], list[int]]:
        v, path, emitted = 0, [], []
        while True:
            cands = tree.candidates.get(v, [])
            if not cands:
                emitted.append(coins.draw(q[v]))
                return path, emitted
            chain = single_candidate_chain(tree, v, eos)
            if len(chain) > 1:  # a run of one-candidate nodes: its coins in one batch (same coins, same order)
                tokens = [tree.tokens[c] for c in chain[1:]]
                n, token = verify_chain(rule, q[chain[:-1]], torch.stack(
                    [tree.draft_probs[u] for u in chain[:-1]]).to(q.device), tokens, coins)
                path += chain[1: n + 1]
                emitted += tokens[:n]
                if token is not None:
                    emitted.append(token)
                    return path, emitted
                if tokens[-1] in eos:
                    return path, emitted
                v = chain[-1]
                continue
            j, token = verify_node(rule, q[v], tree.draft_probs[v].to(q.device),
                                   [tree.tokens[c] for c in cands], coins)
            emitted.append(token)
            if j < 0:
                return path, emitted
            v = cands[j]
            path.append(v)
            if token in eos:
                return path, emitted

    def expected_yield(self, tree: DraftTree, q: torch.Tensor, eos: frozenset[int], rule: str | NodeRule) -> float:
        """Recursively from the root (§10): at a reached node, candidate j is accepted with probability
        prod_{i<j}(1 - a_i) * a_j from the rule's NodeLaw; an accepted EOS ends the step (no extra token)."""
        law_at = get_rule(rule)

        def from_node(v: int) -> float:
            cands = tree.candidates.get(v, [])
            if not cands:
                return 1.0  # the bonus token
            total, reach = 0.0, 1.0
            accepts = self._root_accepts(tree, q, rule) if v == 0 else accept_probs(tree, q, v, law_at)
            for c, a in zip(cands, accepts):
                if a > 0 and reach > 0:
                    total += reach * a * (1.0 if tree.tokens[c] in eos else 1.0 + from_node(c))
                reach *= 1.0 - a
            return total + reach  # the residual token when every candidate is rejected

        return from_node(0)

    def root_acceptance(self, tree: DraftTree, q: torch.Tensor, rule: str | NodeRule) -> float:
        """Exact P(some root candidate is accepted) = 1 - prod_j (1 - a_j) over the root rule's NodeLaw; the same
        value whether expected_yield ran on this tree before or not (they share one computation of the a_j)."""
        reach = 1.0
        for a in self._root_accepts(tree, q, rule):
            reach *= 1.0 - a
        return 1.0 - reach

    def _root_accepts(self, tree: DraftTree, q: torch.Tensor, rule: str | NodeRule) -> list[float]:
        """The root candidates' a_j, computed once per (tree, q, rule) for expected_yield and root_acceptance, in
        whichever order they are called."""
        memo = self._root
        if memo is None or memo[0] is not tree or memo[1] is not q or memo[2] != rule:
            memo = self._root = (tree, q, rule, accept_probs(tree, q, 0, get_rule(rule)))
        return memo[3]


def accept_probs(tree: DraftTree, q: torch.Tensor, v: int, law_at: NodeRule) -> list[float]:
    """The acceptance probabilities a_j of node v's candidates under the node rule's NodeLaw ([] without any)."""
    cands = tree.candidates.get(v, [])
    if not cands:
        return []
    tokens = torch.tensor([tree.tokens[c] for c in cands], device=q.device)
    return law_at(q[v], tree.draft_probs[v].to(q.device), tokens).accept_probs().tolist()
