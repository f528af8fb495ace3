"""The exact whole-engine oracle: the real engine, the drafter's own `build` and its verifier's own `verify`, every
draw and coin enumerated on context-dependent table models, against the target's law and the stated expected yield."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rsd.certify.exact_engine import ContextTables, EnumeratedDraws, TableHeadLM, TableLM, target_law, total_variation
from rsd.certify.outcomes import NondeterministicExperiment, TooManyOutcomes, enumerate_outcomes
from rsd.certify.report import Check
from rsd.core.coins import RandomDraws
from rsd.core.draft_context import ModelDraftContext
from rsd.core.engine import Engine
from rsd.core.generation import Generation
from rsd.core.sampling import SamplingParams
from rsd.core.tree import DraftTree
from rsd.drafters.base import Drafter
from rsd.drafters.contract import DrafterContractError, check_drafted_tree
from rsd.verify import Verifier, verifier_for
from rsd.verify.contract import VerifierContractError

EXACT_BOUND = 1e-12
T1 = SamplingParams(1.0)  # the table oracles' sampling (exact engine, table Monte Carlo)
# (table kind, seed, EOS, max_new_tokens): close and sparse laws, with and without an EOS token, 3 tokens (1-3 steps)
ENGINE_CASES = (("close", 0, (2,), 3), ("close", 1, (), 3), ("sparse", 2, (2,), 3))
ENGINE_MAX_RUNS = 10_000  # engine replays per case (3-6 ms each): K = 3 i.i.d. candidates on 3 tokens exceed it


def engine_for(drafter: Drafter, params: SamplingParams, eos: tuple[int, ...], vocab: int,
               verifier: Verifier | None = None) -> Callable[[TableLM, TableLM], Engine]:
    """A factory (target, draft) -> Engine for `exact_engine.engine_law`; `verifier` replaces the drafter's."""
    return lambda target, draft: Engine(target, draft, drafter, params, list(eos), vocab, verifier)


class _YieldLedger:
    """The drafter's verifier, noting per call the step's tree and laws, the tokens emitted and its expected_yield.

    The expected yield is asked once per distinct tree and laws (the enumeration replays the same steps many times,
    and the check compares each tree's first stated value with its enumerated mean); one ledger serves one case, so
    `eos` and `rule` are fixed."""

    def __init__(self, inner: Verifier) -> None:
        self.inner, self.name, self.calls = inner, inner.name, []
        self.stated: dict[tuple, float] = {}
        self.last: tuple[DraftTree, float] | None = None

    def verify(self, tree, q, coins, eos, rule):
        path, emitted = self.inner.verify(tree, q, coins, eos, rule)
        key = (tuple(tree.tokens), tuple(tree.parents),
               tuple((v, tuple(c)) for v, c in sorted(tree.candidates.items())), q.numpy().tobytes(),
               tuple((v, p.numpy().tobytes()) for v, p in sorted(tree.draft_probs.items())))
        if key not in self.stated:
            self.stated[key] = self.inner.expected_yield(tree, q, eos, rule)
        self.last = (tree, self.stated[key])
        self.calls.append((key, len(emitted), self.stated[key]))
        return path, emitted

    def expected_yield(self, tree, q, eos, rule):
        if self.last is not None and self.last[0] is tree:
            return self.last[1]
        return self.inner.expected_yield(tree, q, eos, rule)


def engine_law_and_yield_error(drafter: Drafter, params: SamplingParams, tables: ContextTables, eos: tuple[int, ...],
                               max_new_tokens: int, feature_draft: bool = False
                               ) -> tuple[dict[tuple[int, ...], float], float]:
    """(the engine's exact emitted law, max over the steps' trees of |verifier.expected_yield - the enumerated mean
    of the tokens its verify emits on that tree|), in one enumeration of every draw and coin; with `feature_draft`
    the draft is a table feature head, which refuses any feature but its context's."""
    draft = TableHeadLM(tables) if feature_draft else TableLM(tables, 1)
    ledger = _YieldLedger(verifier_for(drafter))
    engine = engine_for(drafter, params, eos, tables.vocab, ledger)(TableLM(tables, 0), draft)

    def run(coins) -> tuple[tuple[int, ...], tuple]:
        ledger.calls = []
        out = engine.generate([0], max_new_tokens, None, coins=coins, draws=EnumeratedDraws(coins))
        return tuple(out.new_token_ids), tuple(ledger.calls)

    law: dict[tuple[int, ...], float] = {}
    reached: dict = {}  # tree key -> [probability mass reaching it, mass x tokens emitted, stated expected yield]
    for (seq, calls), w in enumerate_outcomes(run, ENGINE_MAX_RUNS):
        law[seq] = law.get(seq, 0.0) + w
        for key, emitted, expected in calls:
            acc = reached.setdefault(key, [0.0, 0.0, expected])
            acc[0] += w
            acc[1] += w * emitted
    return law, max((abs(total / mass - expected) for mass, total, expected in reached.values()), default=0.0)


def depth_limit_error(drafter: Drafter, vocab: int = 3) -> str | None:
    """The first ctx.max_depth in 0..L-1 the drafter's `build` drafts past (a contract message), or None."""
    engine = engine_for(drafter, T1, (), vocab)(*(TableLM(ContextTables(vocab, 0), role) for role in (0, 1)))
    for depth in range(drafter.draft_length):
        engine.reset()
        tree = DraftTree.with_root(0)
        drafter.build(tree, ModelDraftContext(engine.draft, [0], T1, vocab, RandomDraws(torch.Generator()),
                                              Generation(), engine.clock, depth))
        try:
            check_drafted_tree(tree, depth, drafter.name)
        except DrafterContractError as err:
            return str(err)
    return None


def engine_exact_check(drafter: Drafter, params: SamplingParams = T1, vocab: int = 3,
                       feature_draft: bool = False) -> Check:
    """The exact whole-engine oracle: the drafter's depth limit at every ctx.max_depth < L, then max TV between the
    engine's emitted law and the target's and max |expected_yield - enumerated mean| per tree, over ENGINE_CASES;
    with `feature_draft`, on a table feature head (features handed over by the engine, checked per entry)."""
    worst, worst_yield, cases = 0.0, 0.0, []
    try:
        broken = depth_limit_error(drafter, vocab)
        if broken:
            return Check("exact engine", False, f"the drafter broke its contract: {broken}")
        for kind, seed, eos, n in ENGINE_CASES:
            tables = ContextTables(vocab, seed, kind)
            got, yield_err = engine_law_and_yield_error(drafter, params, tables, eos, n, feature_draft)
            err = total_variation(got, target_law(tables, params, [0], n, frozenset(eos)))
            worst, worst_yield = max(worst, err), max(worst_yield, yield_err)
            cases.append({"kind": kind, "seed": seed, "eos": list(eos), "max_new_tokens": n, "tv": err,
                          "expected_yield_error": yield_err})
    except (DrafterContractError, VerifierContractError) as err:
        return Check("exact engine", False, f"the {'drafter' if isinstance(err, DrafterContractError) else 'verifier'}"
                     f" broke its contract: {err}")
    except TooManyOutcomes:
        return Check("exact engine", None, f"not applicable at this shape: more than {ENGINE_MAX_RUNS} outcomes per "
                     f"case; certify a narrower shape of the same drafter (e.g. 2 candidates per node; the oracle "
                     "runs the same code at every shape); the Monte Carlo oracles still cover this one")
    except (NondeterministicExperiment, AttributeError) as err:
        return Check("exact engine", None, f"not applicable: the drafter draws outside ctx.draws ({err}); the "
                     "Monte Carlo oracles still cover it")
    return Check("exact engine", max(worst, worst_yield) <= EXACT_BOUND,
                 f"max TV(engine, target) = {worst:.2e}, max |expected_yield - enumerated mean| = {worst_yield:.2e} "
                 f"({len(cases)} cases: vocab {vocab}, context-dependent tables, {ENGINE_CASES[0][3]} tokens, EOS and "
                 f"max_new_tokens cuts, depth limits 0..L-1); bound {EXACT_BOUND:.0e}",
                 {"bound": EXACT_BOUND, "cases": cases})


def feature_exact_check(drafter: Drafter) -> Check:
    """engine_exact_check on a table feature head (a draft that reads the target's features of its context)."""
    check = engine_exact_check(drafter, feature_draft=True)
    return Check("exact engine, feature head", check.passed, check.summary, check.details)
