"""Losslessness oracles (docs/algorithms.md#oracles): exact enumeration at one node and over whole drafted trees
(driving the engine's own verification code: `verify_node` and every Verifier's `verify`, through coins that
enumerate every outcome), whole-engine Monte Carlo, and the exact expected yield of one step. Used by the tests and by
`python -m rsd.certify`."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
from scipy import stats

from rsd.core.coins import Coins
from rsd.core.rules import NodeLaw, NodeRule, get_rule, verify_node
from rsd.core.sampling import most_likely
from rsd.core.tree import DraftTree
from rsd.verify.base import Verifier
from rsd.verify.walk import Walk

T = TypeVar("T")

FALSE_ALARM = 1e-3


def candidate_draws(p: torch.Tensor, m: int, scheme: str) -> list[tuple[tuple[int, ...], float]]:
    """Every ordered candidate tuple of length <= m a drafter draws from p, with its probability.

    Schemes: 'iid' (with replacement), 'without_replacement' (draw order; fewer than m when p's support is smaller),
    'single' (m = 1), 'deterministic' (the m most likely tokens, ties to the lower id, with probability 1).
    """
    support = [int(x) for x in (p > 0).nonzero().flatten()]
    if scheme == "deterministic":
        return [(tuple(most_likely(p[None], m)[0][0]), 1.0)]
    if scheme == "single":
        return [((x,), float(p[x])) for x in support]
    if scheme == "iid":
        return [(c, float(torch.prod(p[list(c)].double()))) for c in itertools.product(support, repeat=m)]
    if scheme == "without_replacement":
        m = min(m, len(support))
        out = []
        for c in itertools.permutations(support, m):
            prob, left = 1.0, 1.0
            for x in c:
                prob *= float(p[x]) / left
                left -= float(p[x])
            out.append((c, prob))
        return out
    raise ValueError(f"unknown candidate scheme {scheme!r}")


class NondeterministicExperiment(RuntimeError):
    """A replay offered different outcomes at a coin than the first run did: the experiment draws randomness that
    does not go through its coins (e.g. a drafter that bypasses ctx.draws), so it cannot be enumerated."""


class ScriptedCoins:
    """Coins that replay a script of outcomes, then take the first outcome at every coin past it, noting the other
    outcomes there as `branches` (each a script to replay, with its probability). Certain outcomes (probability 0
    or 1, a one-token draw) consume no script entry, so replays stay aligned. Each script entry carries the outcomes
    offered when it was created; a replay offering others raises NondeterministicExperiment."""

    def __init__(self, script: tuple, prob: float = 1.0) -> None:
        self.script, self.used = script, 0
        self.prob = prob  # of the outcomes taken so far
        self.branches: list[tuple[tuple, float]] = []

    def choose(self, options: list[tuple[object, float]]) -> object:
        """One of `options` [(outcome, probability)]: replayed from the script, or the first one at a new coin."""
        if len(options) == 1:
            return options[0][0]
        offered = tuple(o for o, _ in options)
        if self.used < len(self.script):
            choice, was_offered = self.script[self.used]
            if was_offered != offered:
                raise NondeterministicExperiment("a replay offered other outcomes than the first run at coin "
                                                 f"{self.used}: randomness outside the coins")
            self.used += 1
            return choice
        self.branches += [(self.script + ((o, offered),), self.prob * w) for o, w in options[1:]]
        self.script += ((options[0][0], offered),)
        self.used += 1
        self.prob *= options[0][1]
        return options[0][0]

    def accept(self, prob: float) -> bool:
        prob = min(max(float(prob), 0.0), 1.0)
        return bool(self.choose([(o, w) for o, w in ((True, prob), (False, 1.0 - prob)) if w > 0]))

    def draw(self, probs: torch.Tensor) -> int:
        probs = probs.double()
        total = float(probs.sum())
        return int(self.choose([(int(i), float(probs[i]) / total) for i in (probs > 0).nonzero().flatten()]))


class TooManyOutcomes(RuntimeError):
    """The enumeration needed more replays than its budget."""


def enumerate_outcomes(experiment: Callable[[ScriptedCoins], T], max_runs: int | None = None
                       ) -> list[tuple[T, float]]:
    """Every outcome of `experiment(coins)` with its probability: a depth-first search over every coin (accept and
    draw) the experiment flips, running it once per outcome (each run replays a script, then takes the first outcome
    at every later coin and notes the others). The experiment must be deterministic given its coins (all randomness
    through them); a replay that is not raises NondeterministicExperiment. More than `max_runs` runs raise
    TooManyOutcomes."""
    outcomes, stack, runs = [], [((), 1.0)], 0
    while stack:
        runs += 1
        if max_runs is not None and runs > max_runs:
            raise TooManyOutcomes(f"more than {max_runs} replays")
        coins = ScriptedCoins(*stack.pop())
        result = experiment(coins)
        stack.extend(coins.branches)
        outcomes.append((result, coins.prob))
    return outcomes


def node_output_law(rule: str | NodeRule, q: torch.Tensor, p: torch.Tensor, m: int, scheme: str) -> torch.Tensor:
    """The exact law of the token a node emits, running the engine's `verify_node` on every candidate draw and every
    accept/reject/residual outcome."""
    law = torch.zeros_like(q, dtype=torch.float64)
    rule = get_rule(rule)
    for cands, prob in candidate_draws(p, m, scheme):
        tokens = torch.tensor(cands)
        node = rule(q, p, tokens)  # computed once per draw, not once per replay: the rule is deterministic

        def once(q_: torch.Tensor, p_: torch.Tensor, c_: torch.Tensor, node: NodeLaw = node) -> NodeLaw:
            return node

        for token, w in enumerate_outcomes(lambda coins, t=tokens, r=once: verify_node(r, q, p, t, coins)[1]):
            law[token] += prob * w
    return law


def expected_accepted(tree: DraftTree, q: torch.Tensor, rule: str | NodeRule) -> float:
    """E[accepted depth | tree] for one walk over the tree with `rule` (no EOS): the walk's exact expected yield
    minus one."""
    return Walk().expected_yield(tree, q, frozenset(), rule) - 1.0


def enumerated_yield(verifier: Verifier, tree: DraftTree, q: torch.Tensor, rule: str | NodeRule,
                     eos: frozenset[int] = frozenset()) -> float:
    """E[tokens emitted] on a fixed tree by enumerating every coin of `verifier.verify` (the check of §10)."""
    return sum(w * len(out) for out, w in
               enumerate_outcomes(lambda coins: verifier.verify(tree, q, coins, eos, rule)[1]))


# --- Tree-level exact enumeration (docs/algorithms.md#oracles): drafting and verification on a tiny vocabulary ---

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


@dataclass
class MonteCarloResult:
    """Chi-square goodness of fit of sampled sequences against the exact law (cells with expected < 5 pooled)."""

    samples: int
    cells: int
    chi2: float
    critical: float
    p_value: float
    tv: float
    false_alarm: float = FALSE_ALARM

    @property
    def passed(self) -> bool:
        return self.p_value >= self.false_alarm


def chi_square_test(counts: dict[tuple[int, ...], int], law: dict[tuple[int, ...], float],
                    false_alarm: float = FALSE_ALARM) -> MonteCarloResult:
    """Goodness of fit; a sample outside the law's support fails outright (p-value 0)."""
    n = sum(counts.values())
    if any(law.get(s, 0.0) <= 0 for s in counts):
        return MonteCarloResult(n, len(law), float("inf"), 0.0, 0.0, 1.0, false_alarm)
    keys = sorted(law, key=lambda s: -law[s])
    expected = torch.tensor([law[s] * n for s in keys], dtype=torch.float64)
    observed = torch.tensor([counts.get(s, 0) for s in keys], dtype=torch.float64)
    big = expected >= 5
    exp_cells = torch.cat([expected[big], expected[~big].sum()[None]])
    obs_cells = torch.cat([observed[big], observed[~big].sum()[None]])
    if exp_cells[-1] < 5:  # fold a still-small pooled cell into the smallest kept one
        exp_cells = torch.cat([exp_cells[:-2], (exp_cells[-2] + exp_cells[-1])[None]])
        obs_cells = torch.cat([obs_cells[:-2], (obs_cells[-2] + obs_cells[-1])[None]])
    chi2 = float(((obs_cells - exp_cells) ** 2 / exp_cells).sum())
    dof = len(exp_cells) - 1
    tv = 0.5 * float((observed / n - expected / n).abs().sum())
    return MonteCarloResult(n, dof + 1, chi2, float(stats.chi2.isf(false_alarm, dof)), float(stats.chi2.sf(chi2, dof)),
                            tv, false_alarm)


def chi_square_power(null: dict[tuple[int, ...], float], alternative: dict[tuple[int, ...], float], samples: int,
                     false_alarm: float = FALSE_ALARM) -> float:
    """Power of `chi_square_test` at `samples` draws against `alternative`: the noncentral chi-square approximation
    on the same pooled cells (lambda = n * sum (p1 - p0)^2 / p0)."""
    keys = sorted(null, key=lambda s: -null[s])
    big = [s for s in keys if null[s] * samples >= 5]
    small = [s for s in keys if null[s] * samples < 5]
    cells = [([s], null[s], alternative.get(s, 0.0)) for s in big]
    if small:
        cells.append((small, sum(null[s] for s in small), sum(alternative.get(s, 0.0) for s in small)))
    lam = samples * sum((p1 - p0) ** 2 / p0 for _, p0, p1 in cells if p0 > 0)
    dof = len(cells) - 1
    return float(stats.ncx2.sf(stats.chi2.isf(false_alarm, dof), dof, lam))


def engine_monte_carlo(target: torch.nn.Module, draft: torch.nn.Module | None, drafter, params, prompt: list[int],
                       length: int, samples: int, seed: int = 0,
                       false_alarm: float = FALSE_ALARM) -> MonteCarloResult:
    """Run the whole engine (drafter, tree forward, KV compaction, walk) `samples` times from one prompt and test the
    law of the first `length` tokens against the target's exactly enumerated law. No EOS: every run emits `length`."""
    from rsd.core.engine import Engine
    from rsd.core.sampling import probs_from_logits, prompt_generator
    from rsd.models.adapter import CausalLM

    vocab = target.config.vocab_size
    engine = Engine(CausalLM(target), CausalLM(draft) if draft is not None else None, drafter, params, [], vocab)
    counts: dict[tuple[int, ...], int] = {}
    for i in range(samples):
        seq = tuple(engine.generate(prompt, length, prompt_generator(seed, f"mc-{i}")).new_token_ids)
        counts[seq] = counts.get(seq, 0) + 1
    law = exact_sequence_law(target, prompt, length, lambda logits: probs_from_logits(logits, params))
    return chi_square_test(counts, law, false_alarm)
