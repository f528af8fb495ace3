"""The decode engine: one loop for every method (ALGORITHMS.md §4-5).

Per step: the drafter grows a DraftTree through a DraftContext (one draft forward per tree level), one target
forward scores the uncached committed tokens plus the whole tree, the drafter's verifier (rsd.verify) picks the
accepted path, and both KV caches are compacted to the accepted path by gather. AR is the drafter that drafts nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from rsd.models.adapter import CausalLM
from rsd.sampling import SamplingParams, probs_from_logits, sample
from rsd.tree import DraftTree
from rsd.verify import RandomCoins, verifier_for

if TYPE_CHECKING:
    from rsd.drafters.base import Drafter


@dataclass
class Generation:
    """One prompt's output and the engine's counters."""

    new_token_ids: list[int] = field(default_factory=list)
    target_calls: int = 0
    draft_calls: int = 0
    tokens_verified: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)
    time_draft_s: float = 0.0
    time_target_s: float = 0.0
    wall_s: float = 0.0
    expected_emitted: list[float] = field(default_factory=list)  # per step, exact (ALGORITHMS.md §10)

    @property
    def time_other_s(self) -> float:
        return max(0.0, self.wall_s - self.time_draft_s - self.time_target_s)


@dataclass
class Step:
    """One engine step: the drafted tree, the target laws at its nodes, the accepted path and the emitted tokens."""

    tree: DraftTree
    q: torch.Tensor
    path: list[int]
    emitted: list[int]


class _Stopwatch:
    """Wall-clock reads that synchronise CUDA first, so GPU time lands where it is spent."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()


class DraftContext:
    """What a drafter sees during one step: draft distributions of tree nodes (one draft forward per call) and rng."""

    def __init__(self, draft: CausalLM, committed: list[int], params: SamplingParams, vocab_size: int,
                 gen: torch.Generator, out: Generation, clock: _Stopwatch) -> None:
        self.draft = draft
        self.committed = committed
        self.params = params
        self.vocab_size = vocab_size
        self.gen = gen
        self._out = out
        self._clock = clock
        self.slots: dict[int, int] = {}  # tree node -> position in the draft KV cache

    def probs(self, tree: DraftTree, nodes: list[int]) -> torch.Tensor:
        """p(.|node) for each node [len(nodes), V], in one draft forward; also stored in tree.draft_probs.

        Call with [0] (the root) first, then level by level: every node's parent must have been expanded already.
        """
        start = self._clock.now()
        root_slot = len(self.committed) - 1
        cached = self.draft.cached_len
        if nodes == [0]:
            tokens = torch.tensor(self.committed[cached:])
            positions = torch.arange(cached, len(self.committed))
            attend = torch.ones(len(tokens), cached + len(tokens), dtype=torch.bool).tril(cached)
            logits = self.draft.forward(tokens, positions, attend)[-1:]
            self.slots[0] = root_slot
        else:
            if 0 not in self.slots or any(tree.parents[v] not in self.slots for v in nodes):
                raise RuntimeError("DraftContext.probs: expand the root first, then the tree level by level")
            for i, v in enumerate(nodes):
                self.slots[v] = cached + i
            anc = tree.ancestor_matrix()[nodes]
            slot_of = torch.tensor([self.slots.get(j, -1) for j in range(len(tree))])
            attend = torch.zeros(len(nodes), cached + len(nodes), dtype=torch.bool)
            attend[:, : root_slot + 1] = True
            rows, cols = anc[:, 1:].nonzero(as_tuple=True)
            attend[rows, slot_of[cols + 1]] = True
            tokens = torch.tensor([tree.tokens[v] for v in nodes])
            positions = torch.tensor([root_slot + tree.depths[v] for v in nodes])
            logits = self.draft.forward(tokens, positions, attend)
        probs = probs_from_logits(logits[:, : self.vocab_size], self.params)
        for v, p in zip(nodes, probs):
            tree.draft_probs[v] = p
        self._out.draft_calls += 1
        self._out.time_draft_s += self._clock.now() - start
        return probs

    def sample(self, probs: torch.Tensor) -> int:
        """One token from a draft distribution, with this prompt's generator."""
        return sample(probs, self.gen)


def tree_inputs(tree: DraftTree, committed: list[int], cached: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokens, position ids and attention [q, cached + q] for [committed[cached:], tree nodes 1..n-1] (§5).

    Committed tokens attend causally; a tree node attends to every committed token, its ancestors and itself, at
    position (root position + depth). The last committed token is the tree's root.
    """
    n_new = len(committed) - cached
    root_col = len(committed) - 1
    q_len = n_new + len(tree) - 1
    attend = torch.zeros(q_len, cached + q_len, dtype=torch.bool)
    attend[:n_new, : cached + n_new] = torch.ones(n_new, cached + n_new, dtype=torch.bool).tril(cached)
    attend[n_new:, :root_col] = True
    attend[n_new:, root_col:] = tree.ancestor_matrix()[1:]
    tokens = torch.tensor(committed[cached:] + tree.tokens[1:])
    positions = torch.cat([torch.arange(cached, len(committed)),
                           root_col + torch.tensor(tree.depths[1:], dtype=torch.long)])
    return tokens, positions, attend


class Engine:
    """Generates from the target with a drafter; the output law is the target's, whatever the drafter (lossless)."""

    def __init__(self, target: CausalLM, draft: CausalLM | None, drafter: "Drafter", params: SamplingParams,
                 eos_token_ids: list[int], vocab_size: int) -> None:
        if drafter.draft_length > 0 and draft is None:
            raise ValueError(f"drafter {drafter.name!r} needs a draft model, but the model pair has none")
        self.target, self.draft, self.drafter = target, draft, drafter
        self.params = params
        self.eos = frozenset(eos_token_ids)
        self.vocab_size = vocab_size
        self.clock = _Stopwatch(target.device)
        self.verifier = verifier_for(drafter)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, gen: torch.Generator) -> Generation:
        """Decode up to max_new_tokens after the prompt (stopping at EOS), with all randomness from `gen`."""
        out = Generation()
        t0 = self.clock.now()
        committed = list(prompt_ids)
        self.reset()
        while len(out.new_token_ids) < max_new_tokens:
            step = self.step(committed, gen, out)
            out.accepted_lengths.append(len(step.path))
            paused = self.clock.now()  # the §10 expectation is bookkeeping, not decoding: kept out of wall_s
            out.expected_emitted.append(self.verifier.expected_yield(step.tree, step.q, self.eos))
            t0 += self.clock.now() - paused
            for token in step.emitted[: max_new_tokens - len(out.new_token_ids)]:
                out.new_token_ids.append(token)
                committed.append(token)
                if token in self.eos:
                    out.wall_s = self.clock.now() - t0
                    return out
        out.wall_s = self.clock.now() - t0
        return out

    def reset(self) -> None:
        """Empty both KV caches (a new sequence)."""
        self.target.reset()
        if self.draft is not None:
            self.draft.reset()

    def step(self, committed: list[int], gen: torch.Generator, out: Generation) -> Step:
        """Draft a tree after `committed`, verify it with one target call, compact both caches to the accepted path."""
        tree = DraftTree.with_root(committed[-1], self.drafter.rule)
        ctx = None
        if self.drafter.draft_length > 0:
            ctx = DraftContext(self.draft, committed, self.params, self.vocab_size, gen, out, self.clock)
            self.drafter.build(tree, ctx)
        q = self._score(tree, committed, out)
        path, emitted = self.verifier.verify(tree, q, RandomCoins(gen), self.eos)
        self._compact(tree, committed, path, ctx)
        return Step(tree, q, path, emitted)

    def _score(self, tree: DraftTree, committed: list[int], out: Generation) -> torch.Tensor:
        """One target forward over [uncached committed tokens, tree nodes]: q at every tree node [len(tree), V]."""
        start = self.clock.now()
        cached = self.target.cached_len
        tokens, positions, attend = tree_inputs(tree, committed, cached)
        logits = self.target.forward(tokens, positions, attend)[len(committed) - cached - 1:]
        q = probs_from_logits(logits[:, : self.vocab_size], self.params)
        out.target_calls += 1
        out.tokens_verified.append(len(tree) - 1)
        out.time_target_s += self.clock.now() - start
        return q

    def _compact(self, tree: DraftTree, committed: list[int], path: list[int], ctx: DraftContext | None) -> None:
        """Keep the committed prefix and the accepted path in both caches (gather, never a roll-back by length)."""
        root_col = len(committed) - 1
        self.target.keep(torch.cat([torch.arange(root_col + 1), root_col + torch.tensor(path, dtype=torch.long)]))
        if ctx is not None and 0 in ctx.slots:
            drafted = [ctx.slots[v] for v in path if v in ctx.slots]
            self.draft.keep(torch.cat([torch.arange(root_col + 1), torch.tensor(drafted, dtype=torch.long)]))
