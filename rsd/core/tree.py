"""DraftTree: the drafted tokens of one step, their draft distributions and ordered candidates."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class DraftTree:
    """Node 0 is the root (the last committed token, depth 0); parents come before children.

    `candidates[v]` is v's ordered candidate list as child node indices (repeats allowed, for i.i.d. drafts);
    `draft_probs[v]` is the exact distribution v's candidates were drawn from.
    """

    tokens: list[int]
    parents: list[int] = field(default_factory=lambda: [-1])
    depths: list[int] = field(default_factory=lambda: [0])
    candidates: dict[int, list[int]] = field(default_factory=dict)
    draft_probs: dict[int, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def with_root(cls, token: int) -> "DraftTree":
        return cls(tokens=[token])

    def __len__(self) -> int:
        return len(self.tokens)

    def add_child(self, parent: int, token: int) -> int:
        """Append a new node under `parent`; returns its index (not yet a candidate: see `add_candidate`)."""
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        return len(self.tokens) - 1

    def add_candidate(self, parent: int, token: int, reuse: bool = False) -> int:
        """Append `token` to parent's candidate list; with `reuse`, an existing child with that token is shared."""
        if reuse:
            for c in self.candidates.get(parent, []):
                if self.tokens[c] == token:
                    self.candidates[parent].append(c)
                    return c
        child = self.add_child(parent, token)
        self.candidates.setdefault(parent, []).append(child)
        return child

    def keep(self, nodes: list[int]) -> list[int]:
        """Drop every node outside `nodes` (the root always stays; a kept node's parent must be kept), renumbering
        the rest in their old order; returns old index -> new index (-1 for a dropped node)."""
        kept = sorted({0, *nodes})
        new = [-1] * len(self.tokens)
        for i, v in enumerate(kept):
            if v > 0 and new[self.parents[v]] < 0:
                raise ValueError(f"DraftTree.keep: node {v} is kept but its parent {self.parents[v]} is not")
            new[v] = i
        self.tokens = [self.tokens[v] for v in kept]
        self.parents = [-1] + [new[self.parents[v]] for v in kept[1:]]
        self.depths = [self.depths[v] for v in kept]
        self.candidates = {new[v]: [new[c] for c in cs if new[c] >= 0]
                           for v, cs in self.candidates.items() if new[v] >= 0 and any(new[c] >= 0 for c in cs)}
        self.draft_probs = {new[v]: p for v, p in self.draft_probs.items() if new[v] >= 0}
        return new

    def children(self, v: int) -> list[int]:
        """Distinct children of v in candidate order."""
        return list(dict.fromkeys(self.candidates.get(v, [])))

    @property
    def depth(self) -> int:
        return max(self.depths)

    def ancestor_matrix(self) -> torch.Tensor:
        """anc[i, j] is True iff node j is node i or one of its ancestors (root included).

        Built with one scatter from the nodes' root paths (parents precede children, so each path extends its
        parent's): O(sum of depths) list work and two tensor ops, instead of one tensor op per tree level.
        """
        n = len(self.tokens)
        paths: list[list[int]] = [[0]]
        for v in range(1, n):
            paths.append(paths[self.parents[v]] + [v])
        anc = torch.zeros(n, n, dtype=torch.bool)
        rows = torch.tensor([i for i, p in enumerate(paths) for _ in p])
        anc[rows, torch.tensor([j for p in paths for j in p])] = True
        return anc

    def path_to(self, v: int) -> list[int]:
        """Nodes from the root's first child down to v (the root excluded)."""
        path = []
        while v > 0:
            path.append(v)
            v = self.parents[v]
        return path[::-1]
