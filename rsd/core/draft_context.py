"""The tree-attention inputs of one step: the draft's DraftContext (one draft forward per tree level) and the
target's scoring inputs for the whole tree (docs/algorithms.md#tree-attention)."""

from __future__ import annotations

import torch

from rsd.core.coins import Draws
from rsd.core.generation import Generation, Stopwatch
from rsd.core.sampling import SamplingParams, probs_from_logits
from rsd.core.tree import DraftTree
from rsd.models.adapter import CausalLM


class ModelDraftContext:
    """The engine's `rsd.drafters.base.DraftContext`: draft distributions of tree nodes (one draft forward per call)
    and `draws`, the only randomness a drafter may use (rsd.core.coins.Draws).

    `max_depth` is the deepest level the drafter may draft this step: min(L, tokens still allowed - 1), so no
    drafted token is ever cut off by max_new_tokens. A drafter must draft at most that many levels.
    """

    def __init__(self, draft: CausalLM, committed: list[int], params: SamplingParams, vocab_size: int,
                 draws: Draws, out: Generation, clock: Stopwatch, max_depth: int | None = None,
                 features: torch.Tensor | None = None) -> None:
        self.draft = draft
        # A feature-head draft: the target's features of the committed positions the draft has not cached yet,
        # shifted by one (the row for committed[j] is the feature of position j - 1), and the head's own outputs at
        # expanded nodes, which their children read (docs/algorithms.md#feature-drafts).
        self.features = features
        self.predicted: dict[int, torch.Tensor] = {}
        self.committed = committed
        self.params = params
        self.vocab_size = vocab_size
        self.draws = draws
        self.max_depth = max_depth if max_depth is not None else 1 << 30
        self._out = out
        self._clock = clock
        self.slots: dict[int, int] = {}  # tree node -> position in the draft KV cache
        self._anc_slots: dict[int, list[int]] = {}  # expanded node -> draft-cache slots of its tree ancestors + itself

    def probs(self, tree: DraftTree, nodes: list[int]) -> torch.Tensor:
        """p(.|node) for each node [len(nodes), V], in one draft forward; also stored in tree.draft_probs.

        Call with [0] (the root) first, then level by level: every node's parent must have been expanded already.
        """
        start = self._clock.start()
        root_slot = len(self.committed) - 1
        cached = self.draft.cached_len
        extra = {}
        if nodes == [0]:
            tokens = torch.tensor(self.committed[cached:])
            if self.features is not None:
                if len(self.features) != len(tokens):
                    raise RuntimeError(f"feature draft: {len(self.features)} feature rows for {len(tokens)} "
                                       "uncached committed tokens")
                extra = {"features": self.features}
            logits = self.draft.forward(tokens, torch.arange(cached, len(self.committed)), None, last=1, **extra)
            self.slots[0] = root_slot
            self._anc_slots[0] = []
        else:
            if 0 not in self.slots or any(tree.parents[v] not in self.slots for v in nodes):
                raise RuntimeError("DraftContext.probs: expand the root first, then the tree level by level")
            rows = []
            for i, v in enumerate(nodes):
                self.slots[v] = cached + i
                self._anc_slots[v] = self._anc_slots[tree.parents[v]] + [cached + i]
                rows.append(self._anc_slots[v])
            tokens = torch.tensor([tree.tokens[v] for v in nodes])
            positions = torch.tensor([root_slot + tree.depths[v] for v in nodes])
            if len(nodes) == 1 and len(rows[0]) == cached + 1 - (root_slot + 1):
                attend = None  # a chain: the node sees every cached entry, which is plain causal attention
            else:
                attend = torch.zeros(len(nodes), cached + len(nodes), dtype=torch.bool)
                attend[:, : root_slot + 1] = True
                attend[torch.tensor([i for i, r in enumerate(rows) for _ in r]),
                       torch.tensor([s for r in rows for s in r])] = True
            if self.features is not None:  # a child reads the head's output at its parent (depth > 1: no target)
                extra = {"features": torch.stack([self.predicted[tree.parents[v]] for v in nodes]),
                         "predicted": True}
            logits = self.draft.forward(tokens, positions, attend, **extra)
        if self.features is not None:
            for v, h in zip(nodes, self.draft.outputs):
                self.predicted[v] = h
        probs = probs_from_logits(logits[:, : self.vocab_size], self.params)
        for v, p in zip(nodes, probs):
            tree.draft_probs[v] = p
        self._out.draft_calls += 1
        self._clock.stop(start, self._out, "time_draft_s")
        return probs

    def prune(self, tree: DraftTree, keep: list[int]) -> list[int]:
        """Drop the tree's nodes outside `keep` (DraftTree.keep) and renumber this context's per-node state;
        a dropped node's draft-cache entry stays unread (no kept node attends to it) and is cropped after the step."""
        new = tree.keep(keep)
        self.slots = {new[v]: s for v, s in self.slots.items() if new[v] >= 0}
        self._anc_slots = {new[v]: s for v, s in self._anc_slots.items() if new[v] >= 0}
        self.predicted = {new[v]: h for v, h in self.predicted.items() if new[v] >= 0}
        return new


def tree_inputs(tree: DraftTree, committed: list[int], cached: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokens, position ids and attention [q, cached + q] for [committed[cached:], tree nodes 1..n-1].

    Committed tokens attend causally; a tree node attends to every committed token, its ancestors and itself, at
    position (root position + depth). The last committed token is the tree's root (docs/algorithms.md#tree-attention).
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
