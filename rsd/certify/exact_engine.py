"""The exact whole-engine oracle (docs/algorithms.md#oracles): the real Engine, a drafter's own `build` and its
verifier's own `verify`, run on table models over a 3-4 token vocabulary, with every coin and every draw enumerated.

`TableLM` stands in for `rsd.models.adapter.CausalLM`: its next-token law is an explicit function of the *whole*
context it attends to, read off the attention mask and position ids (so a wrong mask, position or cache compaction
changes the law, and so does a law taken from the wrong node, depth or sibling). `EnumeratedDraws` implements
`rsd.core.coins.Draws` by enumeration: single and i.i.d. draws, sequential sampling without replacement (the law of
Gumbel-top-k) and the exact law of a stochastic beam search step given the beams kept before (the exponential-race
view of the Gumbel process). `engine_law` returns the law of the emitted sequence; `target_law` the target's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from rsd.certify.outcomes import ScriptedCoins, enumerate_outcomes
from rsd.core.sampling import SamplingParams, probs_from_logits

TABLE_KINDS = ("close", "sparse", "far")


class ContextTables:
    """Target and draft next-token laws for every context, random per context (seeded by the context itself).

    'close': the draft is 0.75 target + 0.25 noise (deep levels are accepted often); 'sparse': the draft gives one
    token zero mass and the target another (a trimmed head, top-k masks); 'far': independent laws.
    """

    def __init__(self, vocab: int, seed: int, kind: str = "close") -> None:
        if kind not in TABLE_KINDS:
            raise ValueError(f"unknown table kind {kind!r}; known: {TABLE_KINDS}")
        self.vocab, self.seed, self.kind = vocab, seed, kind
        self._cache: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}
        self._ids: dict[tuple[int, ...], int] = {(): 0}  # the empty context is id 0: the engine's zero feature
        self._contexts: list[tuple[int, ...]] = [()]

    def context_id(self, context: tuple[int, ...]) -> int:
        """A stable small id for a context (the table models' "hidden state")."""
        if context not in self._ids:
            self._ids[context] = len(self._contexts)
            self._contexts.append(context)
        return self._ids[context]

    def context_of(self, ident: int) -> tuple[int, ...] | None:
        return self._contexts[ident] if 0 <= ident < len(self._contexts) else None

    def laws(self, context: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(target law, draft law) after `context`, float64."""
        if context not in self._cache:
            gen = torch.Generator().manual_seed(hash((self.seed, TABLE_KINDS.index(self.kind), context)) & (2**62 - 1))
            q = torch.softmax(1.5 * torch.randn(self.vocab, generator=gen, dtype=torch.float64), -1)
            noise = torch.softmax(1.5 * torch.randn(self.vocab, generator=gen, dtype=torch.float64), -1)
            p = 0.75 * q + 0.25 * noise if self.kind != "far" else noise
            if self.kind == "sparse":
                perm = torch.randperm(self.vocab, generator=gen)
                p[perm[0]] = 0
                q[perm[1]] = 0
            self._cache[context] = (q / q.sum(), p / p.sum())
        return self._cache[context]


class TableLM:
    """A CausalLM with table laws: the logits of a query are log law(context it sees), float64.

    The context of a query is the tokens it attends to, sorted by position; they must sit at positions 0..pos
    exactly (anything else is a tree-attention bug and raises).
    """

    feature_layers: tuple = ()  # as a draft it reads no target features (TableHeadLM does)

    def __init__(self, tables: ContextTables, role: int) -> None:
        self.tables, self.role = tables, role  # role 0: target, 1: draft
        self.device, self.dtype = torch.device("cpu"), torch.float64
        self.num_params = 0
        self.tokens: list[int] = []
        self.positions: list[int] = []
        self.features: torch.Tensor | None = None  # with features=(...): the id of each query's whole context

    def reset(self) -> None:
        self.tokens, self.positions = [], []

    @property
    def cached_len(self) -> int:
        return len(self.tokens)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor | None,
                last: int = 0, features: tuple = ()) -> torch.Tensor:
        contexts = self.contexts(tokens, positions, attend)
        if features:  # the "hidden state" of a position is its whole context, as an id (a function of the context)
            self.features = torch.tensor([[float(self.tables.context_id(c))] for c in contexts], dtype=torch.float64)
        return torch.stack([self.tables.laws(c)[self.role].log() for c in contexts[len(contexts) - last
                                                                                   if last else 0:]])

    def contexts(self, tokens: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor | None
                 ) -> list[tuple[int, ...]]:
        """Cache the queries and return the context each one sees; raises unless it sits at positions 0..pos."""
        cached = len(self.tokens)
        self.tokens += tokens.tolist()
        self.positions += positions.tolist()
        n = len(tokens)
        if attend is None:
            attend = torch.ones(n, cached + n, dtype=torch.bool).tril(cached)
        out = []
        for i in range(n):
            seen = sorted((self.positions[j], self.tokens[j]) for j in attend[i].nonzero().flatten().tolist())
            if [pos for pos, _ in seen] != list(range(positions[i].item() + 1)):
                raise AssertionError(f"query {i} sees positions {[pos for pos, _ in seen]}, not 0..{positions[i]}")
            out.append(tuple(t for _, t in seen))
        return out

    def compact(self, prefix: int, moved: torch.Tensor) -> None:
        keep = list(range(prefix)) + moved.tolist()
        self.tokens = [self.tokens[j] for j in keep]
        self.positions = [self.positions[j] for j in keep]


class TableHeadLM(TableLM):
    """A feature-head draft on table laws: each entry reads the feature of the position before it (the target's
    context id, or at depth > 1 the head's own output at the parent) and raises unless that feature is the id of
    exactly the context the entry sees minus its own token. A feature fed one position off, from another node or
    from a rejected one is therefore an error of the oracle, as a wrong mask is; the law is the draft table's."""

    reads_features = True
    feature_layers = ("last",)
    feature_width = 1

    def __init__(self, tables: ContextTables) -> None:
        super().__init__(tables, 1)
        self.outputs: torch.Tensor | None = None

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor | None,
                last: int = 0, features: torch.Tensor | None = None, predicted: bool = False) -> torch.Tensor:
        if features is None or len(features) != len(tokens):
            raise AssertionError(f"a feature head needs one feature row per token, got {features!r:.40}")
        contexts = self.contexts(tokens, positions, attend)
        for i, c in enumerate(contexts):
            if int(features[i, 0]) != self.tables.context_id(c[:-1]):
                raise AssertionError(f"entry {i} (context {c}) read the feature of context "
                                     f"{self.tables.context_of(int(features[i, 0]))}, not of {c[:-1]}")
        rows = contexts[len(contexts) - last if last else 0:]
        self.outputs = torch.tensor([[float(self.tables.context_id(c))] for c in rows], dtype=torch.float64)
        return torch.stack([self.tables.laws(c)[1].log() for c in rows])


@dataclass
class _Level:
    """The beams one stochastic beam search step kept, and the children it saw but did not keep."""

    beams: list[tuple[int, ...]]  # kept prefixes, in key order
    others: list[tuple[tuple[int, ...], float]] = field(default_factory=list)  # (prefix, mass) seen, not kept


def _race_outcomes(children: list[tuple[tuple[int, ...], float]], history: list[_Level], width: int
                   ) -> dict[tuple[tuple[int, ...], ...], float]:
    """P(the next level keeps these prefixes in this order, and every earlier level kept what it kept), for every
    outcome: an exponential race over the new children and the unexpanded prefixes of earlier levels (each a clock
    with rate = its mass), pruned to ring orders under which each earlier level's first `width` distinct prefixes
    are its kept beams, in order."""
    items = [(c, m) for c, m in children if m > 0]
    for level in history:
        items += [(o, m) for o, m in level.others if m > 0]
    depth = len(history) + 1
    out: dict[tuple[tuple[int, ...], ...], float] = {}

    def settled(s: tuple[int, ...], seen: list[int]) -> bool:
        """s can no longer change the outcome: the next level is complete and every level's prefix of s is a kept
        beam that has already appeared (dropping such clocks leaves the others' relative order unchanged)."""
        return all(j + 1 <= len(s) and s[: j + 1] in level.beams[: seen[j]] for j, level in enumerate(history))

    def visit(left: list[tuple[tuple[int, ...], float]], seen: list[int], got: tuple, prob: float) -> None:
        done = len(got) == width or not any(len(s) == depth for s, _ in left)
        if done:
            if all(seen[j] == len(history[j].beams) for j in range(len(history))):
                out[got] = out.get(got, 0.0) + prob
                return
            left = [(s, m) for s, m in left if not settled(s, seen)]
        total = sum(m for _, m in left)
        for i, (s, m) in enumerate(left):
            nxt, ok = list(seen), True
            for j, level in enumerate(history):
                if j + 1 > len(s):  # s is an unexpanded prefix shorter than this level: a prefix not kept here
                    ok = nxt[j] == len(level.beams)
                elif s[: j + 1] in level.beams[: nxt[j]]:
                    continue
                elif nxt[j] < len(level.beams) and s[: j + 1] == level.beams[nxt[j]]:
                    nxt[j] += 1
                else:
                    ok = nxt[j] == len(level.beams)
                if not ok:
                    break
            if not ok:
                continue
            if not done:
                if len(s) != depth:
                    continue  # an unexpanded prefix among the kept: ruled out by the earlier levels
                visit(left[:i] + left[i + 1:], nxt, got + (s,), prob * m / total)
            else:
                visit(left[:i] + left[i + 1:], nxt, got, prob * m / total)

    visit(items, [0] * len(history), (), 1.0)
    return out


class EnumeratedDraws:
    """`rsd.core.coins.Draws` whose every outcome is a branch of `enumerate_outcomes` (through `ScriptedCoins`)."""

    def __init__(self, coins: ScriptedCoins) -> None:
        self.coins = coins
        self._levels: list[_Level] = []

    def one(self, probs: torch.Tensor) -> int:
        return self.coins.draw(probs)

    def iid(self, probs: torch.Tensor, n: int) -> list[int]:
        return [self.coins.draw(probs) for _ in range(n)]

    def without_replacement(self, probs: torch.Tensor, k: int) -> list[list[int]]:
        rows = []
        for row in probs:
            left, drawn = row.double().clone(), []
            while len(drawn) < k and left.sum() > 0:
                x = self.coins.draw(left / left.sum())
                left[x] = 0
                drawn.append(x)
            rows.append(drawn)
        return rows

    def beam_step(self, phi: torch.Tensor, key: torch.Tensor, logp: torch.Tensor, width: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Keys returned are handles (the kept rank, negated), which the drafter hands back on its next call."""
        if len(key) == 1 and float(key[0]) == 0.0 and float(phi[0]) == 0.0:
            self._levels = []  # a new search from the root
            beams: list[tuple[int, ...]] = [()]
        else:
            beams = [self._levels[-1].beams[int(-k) - 1] for k in key.tolist()]
        logp = logp.double()
        mass = {}
        for i, b in enumerate(beams):
            for x in range(logp.shape[-1]):
                mass[b + (x,)] = (i, x, float((phi[i].double() + logp[i, x]).exp()))
        options = _race_outcomes([(s, m) for s, (_, _, m) in mass.items()], self._levels, width)
        total = sum(options.values())
        kept = self.coins.choose(sorted(((o, w / total) for o, w in options.items()), key=lambda t: t[0]))
        self._levels.append(_Level(list(kept), [(s, m) for s, (_, _, m) in mass.items() if s not in kept]))
        parent = torch.tensor([mass[s][0] for s in kept], dtype=torch.long)
        token = torch.tensor([mass[s][1] for s in kept], dtype=torch.long)
        new_phi = torch.stack([phi[mass[s][0]].double() + logp[mass[s][0], mass[s][1]] for s in kept]) if kept \
            else torch.zeros(0, dtype=torch.float64)
        return parent, token, new_phi, -torch.arange(1, len(kept) + 1, dtype=torch.float64)


def engine_law(make_engine: Callable[[TableLM, TableLM], object], tables: ContextTables, prompt: list[int],
               max_new_tokens: int, max_runs: int | None = None) -> dict[tuple[int, ...], float]:
    """The exact law of the engine's emitted tokens, enumerating every draw of the drafter and coin of the verifier."""
    engine = make_engine(TableLM(tables, 0), TableLM(tables, 1))

    def run(coins: ScriptedCoins) -> tuple[int, ...]:
        return tuple(engine.generate(prompt, max_new_tokens, None, coins=coins,
                                     draws=EnumeratedDraws(coins)).new_token_ids)

    law: dict[tuple[int, ...], float] = {}
    for seq, w in enumerate_outcomes(run, max_runs):
        law[seq] = law.get(seq, 0.0) + w
    return law


def target_law(tables: ContextTables, params: SamplingParams, prompt: list[int], max_new_tokens: int,
               eos: frozenset[int]) -> dict[tuple[int, ...], float]:
    """The target's law of up to `max_new_tokens` tokens after `prompt`, stopping after an EOS."""
    law, todo = {}, [((), 1.0)]
    while todo:
        s, w = todo.pop()
        if len(s) == max_new_tokens or (s and s[-1] in eos):
            law[s] = law.get(s, 0.0) + w
            continue
        q = probs_from_logits(tables.laws(tuple(prompt) + s)[0].log()[None], params)[0]
        todo += [(s + (x,), w * float(q[x])) for x in range(len(q)) if q[x] > 0]
    return law


def total_variation(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(s, 0.0) - b.get(s, 0.0)) for s in set(a) | set(b))
