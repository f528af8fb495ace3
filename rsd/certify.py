"""Losslessness certificate for a drafter: `python -m rsd.certify drafter=NAME [overrides] [--samples N]`.

Runs (1) the exact whole-engine oracle: the real engine, the drafter's own `build` (every draw through ctx.draws
enumerated) and its verifier's own `verify`, on table models over a 3-token vocabulary whose laws depend on the whole
context, through several steps with EOS and max_new_tokens cuts, against the target's law to 1e-12; (2) the
exact-enumeration oracle under the drafter's declared candidate scheme (the node rule at one node, the verifier on
tiny drafted trees); (3) whole-engine Monte Carlo on table models whose draft is close to the target (deep levels are
reached; the acceptance by depth it exercised and its power against a planted bug are reported) and on a tiny
transformers pair (the real KV cache); (4) greedy identity against AR on tiny Llama and OPT pairs (and the embedded
pair with --embedded). Every step also checks the drafter's contract (depth <= ctx.max_depth, every drafted token
has mass under its parent's recorded law). Prints the measured distance, the bound, the false-alarm rate and the
samples used; exits 1 if any check fails, naming the check that caught it.

It then reports usefulness, which never changes the verdict: on the embedded SmolLM2 pair (the tiny pair when that is
unavailable), a few short prompts, the drafter's mean accepted length and block efficiency next to SD at the same L
and AR, with a WARNING when its acceptance is ~0 or it does not beat AR (--no-usefulness skips it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any

import torch

from rsd.drafters import SD
from rsd.drafters.base import Drafter
from rsd.drafters.contract import DrafterContractError
from rsd.engine import Engine
from rsd.errors import RsdError, one_line
from rsd.exact_engine import ContextTables, TableHeadLM, TableLM, engine_law, target_law, total_variation
from rsd.oracles import (
    FALSE_ALARM,
    LAW_KINDS,
    NondeterministicExperiment,
    PrefixLaws,
    TooManyOutcomes,
    chi_square_power,
    chi_square_test,
    draft_chain,
    draft_iid_trie,
    draft_without_replacement,
    engine_monte_carlo,
    enumerate_outcomes,
    node_output_law,
    tree_law_error,
)
from rsd.paths import CONF_DIR
from rsd.plugin import PluginError
from rsd.sampling import SamplingParams, prompt_generator
from rsd.verify import verifier_for
from rsd.verify.contract import VerifierContractError

EXACT_BOUND = 1e-12
# T=2 with top-k and top-p keeps many sequences alive while both filters bite (a check with power, not 4 cells).
MC_SAMPLING = (SamplingParams(1.0), SamplingParams(2.0, top_k=4, top_p=0.95))


@dataclass
class Check:
    """One oracle's verdict, with the measured quantity and its bound."""

    name: str
    passed: bool | None  # None: not applicable
    summary: str
    details: dict = field(default_factory=dict)


@dataclass
class Usefulness:
    """How much a drafter helps on a real pair (reported next to the verdict, never part of it)."""

    setting: str  # the pair, prompts, tokens, sampling and L the numbers were measured on
    rows: dict[str, dict[str, float]]  # method -> mean_accepted_length, block_efficiency
    warning: str | None

    def render(self) -> str:
        lines = [f"Usefulness (reported only, not part of the verdict): {self.setting}",
                 f"  {'method':<16} {'mean accepted length':>20} {'block efficiency':>17}"]
        for method, row in self.rows.items():
            lines.append(f"  {method:<16} {row['mean_accepted_length']:>20.2f} {row['block_efficiency']:>17.2f}")
        if self.warning:
            lines.append(f"WARNING: {self.warning}")
        return "\n".join(lines)


@dataclass
class Certificate:
    drafter: str
    shape: dict
    rule: str
    checks: list[Check]
    verifier: str = "walk"
    usefulness: Usefulness | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed is not False for c in self.checks)

    def render(self) -> str:
        lines = [f"Losslessness certificate: drafter {self.drafter}, shape {self.shape}, node rule {self.rule}, "
                 f"verifier {self.verifier}"]
        for c in self.checks:
            verdict = {True: "PASS", False: "FAIL", None: "n/a "}[c.passed]
            lines.append(f"  {verdict}  {c.name:<22} {c.summary}")
        lines.append(f"RESULT: {'PASS' if self.passed else 'FAIL'}")
        if self.usefulness is not None:
            lines.append(self.usefulness.render())
        return "\n".join(lines)


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
    scheme = getattr(drafter, "candidate_scheme", None)
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


# (table kind, seed, EOS, max_new_tokens): close and sparse laws, with and without an EOS token, 3 tokens (1-3 steps)
ENGINE_CASES = (("close", 0, (2,), 3), ("close", 1, (), 3), ("sparse", 2, (2,), 3))
ENGINE_MAX_RUNS = 10_000  # engine replays per case (3-6 ms each): K = 3 i.i.d. candidates on 3 tokens exceed it


def _engine_for(drafter: Drafter, params: SamplingParams, eos: tuple[int, ...], vocab: int):
    return lambda target, draft: Engine(target, draft, drafter, params, list(eos), vocab)


T1 = SamplingParams(1.0)


class _YieldLedger:
    """The drafter's verifier, noting per call the step's tree and laws, the tokens emitted and its expected_yield.

    The expected yield is asked once per distinct tree and laws (the enumeration replays the same steps many times,
    and the check compares each tree's first stated value with its enumerated mean); one ledger serves one case, so
    `eos` and `rule` are fixed."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.calls = inner, inner.name, []
        self.stated: dict[tuple, float] = {}
        self.last: tuple[Any, float] | None = None

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
    from rsd.exact_engine import EnumeratedDraws
    from rsd.oracles import enumerate_outcomes

    draft = TableHeadLM(tables) if feature_draft else TableLM(tables, 1)
    engine = _engine_for(drafter, params, eos, tables.vocab)(TableLM(tables, 0), draft)
    engine.verifier = ledger = _YieldLedger(engine.verifier)

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
    from rsd.coins import RandomDraws
    from rsd.drafters.contract import check_drafted_tree
    from rsd.engine import Generation, ModelDraftContext
    from rsd.tree import DraftTree

    engine = _engine_for(drafter, T1, (), vocab)(*(TableLM(ContextTables(vocab, 0), role) for role in (0, 1)))
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


def _feature_exact_check(drafter: Drafter) -> Check:
    """engine_exact_check on a table feature head (a draft that reads the target's features of its context)."""
    check = engine_exact_check(drafter, feature_draft=True)
    return Check("exact engine, feature head", check.passed, check.summary, check.details)


def _two_beam_steps(draws, width: int = 2) -> tuple:
    """Two stochastic beam search steps over fixed context-dependent laws (vocab 3): the kept (prefix) lists."""
    root = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    child = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.1, 0.7, 0.2]], dtype=torch.float64)
    parent, token, phi, key = draws.beam_step(torch.zeros(1, dtype=torch.float64),
                                              torch.zeros(1, dtype=torch.float64), root.log()[None], width)
    first = tuple(int(t) for t in token)
    parent, token, phi, key = draws.beam_step(phi, key, child[list(first)].log(), width)
    return first, tuple((first[int(b)], int(t)) for b, t in zip(parent, token))


def draw_helpers_check(samples: int = 20000, seed: int = 0) -> Check:
    """The production draw helpers (rsd.coins.RandomDraws) against the laws the exact oracle enumerates: Gumbel-top-3
    of one law, and two stochastic beam search steps; chi-square each."""
    from rsd.coins import RandomDraws
    from rsd.exact_engine import EnumeratedDraws

    gen = torch.Generator().manual_seed(seed)
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    experiments = {
        "Gumbel-top-3": lambda draws: tuple(draws.without_replacement(p[None], 3)[0]),
        "beam search, 2 steps": _two_beam_steps,
    }
    results, worst = {}, 1.0
    for name, run in experiments.items():
        law: dict = {}
        for out, w in enumerate_outcomes(lambda coins, run=run: run(EnumeratedDraws(coins))):
            law[out] = law.get(out, 0.0) + w
        counts: dict = {}
        production = RandomDraws(gen)
        for _ in range(samples):
            out = run(production)
            counts[out] = counts.get(out, 0) + 1
        res = chi_square_test(counts, law)
        results[name] = asdict(res)
        worst = min(worst, res.p_value)
    text = "; ".join(f"{n}: p = {r['p_value']:.3g} ({r['cells']} cells)" for n, r in results.items())
    return Check("draw helpers", worst >= FALSE_ALARM, f"{text}, samples {samples} each", results)


class RootLawSD(SD):
    """A planted bug: each node's law is computed, but the candidate is drawn from the root's (lossy from the second
    token of a step on). The stated alternative the table Monte Carlo check's power is reported against."""

    def build(self, tree, ctx):
        v = 0
        for _ in range(min(self.length, ctx.max_depth)):
            ctx.probs(tree, [v])
            v = tree.add_candidate(v, ctx.draws.one(tree.draft_probs[0]))


@cache  # a fixed law (a minute of enumeration), the same for every drafter certified in this process
def planted_sd_law(vocab: int, seed: int, params: SamplingParams, length: int) -> dict:
    """The exact law of RootLawSD(2) on the close tables ContextTables(vocab, seed)."""
    return engine_law(_engine_for(RootLawSD(2), params, (), vocab), ContextTables(vocab, seed, "close"), [0], length)


def table_monte_carlo_check(drafter: Drafter, samples: int, params: SamplingParams = T1,
                            vocab: int = 4, length: int = 4, seed: int = 0) -> Check:
    """The engine with its production draws (the prompt's generator) on close table models: chi-square of the first
    `length` tokens against the exact target law, the acceptance by depth exercised, and the power at this sample
    size against the planted SD bug (second token from the root's law)."""
    from rsd.sampling import prompt_generator

    tables = ContextTables(vocab, seed, "close")
    engine = Engine(TableLM(tables, 0), TableLM(tables, 1), drafter, params, [], vocab)
    counts: dict[tuple[int, ...], int] = {}
    reached: dict[int, int] = {}
    steps = 0
    try:
        for i in range(samples):
            out = engine.generate([0], length, prompt_generator(seed, f"table-mc-{i}"))
            counts[tuple(out.new_token_ids)] = counts.get(tuple(out.new_token_ids), 0) + 1
            steps += len(out.accepted_lengths)
            for a in out.accepted_lengths:
                for d in range(1, a + 1):
                    reached[d] = reached.get(d, 0) + 1
    except DrafterContractError as err:
        return Check("Monte Carlo tables", False, f"the drafter broke its contract: {err}")
    law = target_law(tables, params, [0], length, frozenset())
    res = chi_square_test(counts, law)
    power = chi_square_power(law, planted_sd_law(vocab, seed, params, length), samples)
    depth = {d: reached[d] / steps for d in sorted(reached)}
    depth_text = ", ".join(f"d{d} {f:.2f}" for d, f in depth.items()) or "none"
    return Check("Monte Carlo tables", res.passed,
                 f"chi2 = {res.chi2:.1f} vs critical {res.critical:.1f} ({res.cells} cells), p = {res.p_value:.3g}, "
                 f"samples {samples}; steps accepting >= d tokens: {depth_text}; power vs the planted SD "
                 f"root-law bug {power:.2f}",
                 {**asdict(res), "acceptance_by_depth": depth, "power_vs_planted_sd_bug": power})


def monte_carlo_check(drafter: Drafter, params: SamplingParams, samples: int, seed: int = 0) -> Check:
    """Whole engine on a tiny vocabulary-8 Llama pair: law of the first 3 tokens vs the exact target law."""
    from rsd.models.tiny import tiny_pair

    target, draft = tiny_pair("llama", 8, seed=seed, init_std=0.3)
    res = engine_monte_carlo(target, draft, drafter, params, [3, 4, 5], 3, samples, seed)
    name = f"Monte Carlo T={params.temperature:g}" + (f" k={params.top_k}" if params.top_k else "") + (
        f" p={params.top_p:g}" if params.top_p < 1 else "")
    return Check(name, res.passed,
                 f"chi2 = {res.chi2:.1f} vs critical {res.critical:.1f} ({res.cells} cells, false-alarm "
                 f"{res.false_alarm:g}), p = {res.p_value:.3g}, TV = {res.tv:.4f}, samples {res.samples}",
                 asdict(res))


def greedy_pairs(embedded: bool) -> list[tuple[str, torch.nn.Module, torch.nn.Module, list[list[int]], list[int]]]:
    """(name, target, draft, prompts, eos) for greedy identity: tiny pairs with an independent and a copied draft."""
    from rsd.models.tiny import tiny_pair

    pairs = []
    for arch in ("llama", "opt"):
        target, draft = tiny_pair(arch, 64, seed=3)
        prompts = [[5, 9, 2], [17, 3, 40, 41, 8], [60]]
        pairs.append((f"tiny {arch}", target, draft, prompts, []))
        pairs.append((f"tiny {arch}, draft = target", target, target, prompts, []))
    if embedded:
        from rsd.data import load_builtin
        from rsd.models.embedded import default_pair_config
        from rsd.models.pairs import load_pair

        pair = load_pair({**default_pair_config(), "dtype": "float32"})
        prompts = [pair.encode_prompt(load_builtin(n)[0].prompt) for n in ("dolly_builtin", "xsum_builtin")]
        pairs.append(("embedded smollm2", pair.target.model, pair.draft.model, prompts, pair.eos_token_ids))
    return pairs


def greedy_check(drafter: Drafter, embedded: bool, max_new_tokens: int = 24) -> Check:
    """At temperature 0 the drafter's output equals AR's token for token."""
    from rsd.drafters import AR
    from rsd.engine import Engine
    from rsd.models.adapter import CausalLM

    greedy = SamplingParams(0.0)
    total, equal, mismatches = 0, 0, []
    for name, target, draft, prompts, eos in greedy_pairs(embedded):
        vocab = min(target.get_output_embeddings().weight.shape[0], draft.get_output_embeddings().weight.shape[0])
        ar = Engine(CausalLM(target), None, AR(), greedy, eos, vocab)
        spec = Engine(CausalLM(target), CausalLM(draft), drafter, greedy, eos, vocab)
        for i, prompt in enumerate(prompts):
            a = ar.generate(prompt, max_new_tokens, prompt_generator(0, str(i))).new_token_ids
            b = spec.generate(prompt, max_new_tokens, prompt_generator(0, str(i))).new_token_ids
            total += 1
            equal += a == b
            if a != b:
                mismatches.append(name)
    return Check("greedy identity", equal == total,
                 f"{equal}/{total} sequences equal to AR token for token ({max_new_tokens} tokens each)"
                 + (f"; mismatches on {sorted(set(mismatches))}" if mismatches else ""),
                 {"equal": equal, "total": total})


USEFUL_PROMPTS, USEFUL_TOKENS = 3, 24  # short on purpose: a smoke test of usefulness, not a benchmark
USELESS_ACCEPTANCE = 0.05  # mean accepted tokens per step below this is "~0"
AR_MARGIN = 1.05  # block efficiency below this does not beat AR (exactly 1 token per target call)


def _load_named_pair(name: str):
    """The model pair conf/model_pair/NAME.yaml describes."""
    from omegaconf import OmegaConf

    from rsd.models.pairs import load_pair

    return load_pair(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model_pair" / f"{name}.yaml")))


def usefulness_check(name: str, drafter: Drafter, model_pair: str = "smollm2", prompts: int = USEFUL_PROMPTS,
                     max_new_tokens: int = USEFUL_TOKENS) -> Usefulness | None:
    """Mean accepted length and block efficiency of `drafter`, SD at the same L and AR, at T = 1 on the first
    `prompts` dolly_builtin prompts; the tiny pair stands in when `model_pair` cannot be loaded. None for a drafter
    that drafts nothing. Metrics as defined in docs/algorithms.md#metrics."""
    from rsd.data import load_builtin
    from rsd.engine import Engine
    from rsd.models.embedded import ModelUnavailableError

    depth = drafter.draft_length
    if depth == 0:
        return None
    try:
        pair, pair_note = _load_named_pair(model_pair), f"{model_pair} pair"
    except ModelUnavailableError as err:
        pair = _load_named_pair("tiny_llama")
        pair_note = (f"tiny_llama pair (random weights, says little about real models; {model_pair} is unavailable: "
                     f"{str(err).splitlines()[0]})")
    examples = load_builtin("dolly_builtin")[:prompts]
    sampling = SamplingParams(1.0)
    rows = {"ar": {"mean_accepted_length": 0.0, "block_efficiency": 1.0}}  # one token per call, by definition
    setting = (f"{pair_note}, {len(examples)} dolly_builtin prompts x {max_new_tokens} new tokens, T=1, L={depth} "
               "(a short smoke test, not a benchmark)")
    for method, d in ({f"sd (L={depth})": SD(depth), name: drafter}).items():
        try:
            engine = Engine(pair.target, pair.draft, d, sampling, pair.eos_token_ids, pair.vocab_size)
            outs = [engine.generate(pair.encode_prompt(ex.prompt), max_new_tokens,
                                    prompt_generator(0, ex.id, pair.target.device)) for ex in examples]
        except Exception as err:  # noqa: BLE001 - the drafter's code may raise anything; say so in one line
            return Usefulness(setting, rows, raised_text(method, err))
        accepted = [a for out in outs for a in out.accepted_lengths]
        rows[method] = {"mean_accepted_length": sum(accepted) / len(accepted),
                        "block_efficiency": sum(len(o.new_token_ids) for o in outs) / sum(o.target_calls for o in outs)}
    mine = rows[name]
    problems = []
    if mine["mean_accepted_length"] < USELESS_ACCEPTANCE:
        problems.append(f"its acceptance is ~0 (mean accepted length {mine['mean_accepted_length']:.2f} tokens per "
                        "step): check that it drafts the tokens it means to")
    if mine["block_efficiency"] < AR_MARGIN:
        problems.append(f"it does not beat AR (block efficiency {mine['block_efficiency']:.2f} < {AR_MARGIN})")
    warning = f"{name} is lossless but useless here: " + "; ".join(problems) if problems else None
    return Usefulness(setting, rows, warning)


def raised_text(who: str, err: BaseException) -> str:
    """'WHO raised KeyError: message (at file:line)' for an error from a plug-in's code; a PluginError (the engine's
    wrapper around a drafter's or verifier's exception) is shown as the exception it wraps, where it was raised."""
    if isinstance(err, PluginError) and err.__cause__ is not None:
        err = err.__cause__
    return f"{who} raised {type(err).__name__}: {one_line(err)}"


def _guarded(name: str, check: Callable[..., Check], *args) -> Check:
    """Run one check; an error raised by the drafter's code is that check's FAIL, in one line."""
    try:
        return check(*args)
    except DrafterContractError as err:
        return Check(name, False, f"the drafter broke its contract: {err}")
    except VerifierContractError as err:
        return Check(name, False, f"the verifier broke its contract: {err}")
    except Exception as err:  # noqa: BLE001 - user code may raise anything; the certificate must still be printed
        return Check(name, False, raised_text("", err).lstrip())


def certify(name: str, drafter: Drafter, samples: int = 2000, sampling: tuple[SamplingParams, ...] = MC_SAMPLING,
            embedded: bool = False, usefulness: bool = False, table_samples: int = 1000) -> Certificate:
    """Every oracle for one drafter instance; with `usefulness`, also `usefulness_check` (never the verdict)."""
    checks = [_guarded("exact engine", engine_exact_check, drafter)]
    if drafter.uses_draft_model:
        checks.append(_guarded("exact engine, feature head", _feature_exact_check, drafter))
    checks += [
              _guarded("exact enumeration", exact_check, drafter),
              _guarded("Monte Carlo tables", table_monte_carlo_check, drafter, table_samples),
              _guarded("draw helpers", draw_helpers_check)]
    checks += [_guarded(f"Monte Carlo T={params.temperature:g}", monte_carlo_check, drafter, params, samples)
               for params in sampling]
    checks.append(_guarded("greedy identity", greedy_check, drafter, embedded))
    rule = drafter.rule if isinstance(drafter.rule, str) else getattr(drafter.rule, "__name__", "custom")
    return Certificate(name, drafter.describe(), rule, checks, str(drafter.verifier),
                       usefulness_check(name, drafter) if usefulness else None)


def compose_drafters(overrides: list[str]) -> list[tuple[str, Drafter]]:
    """The drafter(s) a Hydra override list names, at budget.draft_length=2 unless the overrides say otherwise."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from rsd.errors import ConfigError
    from rsd.runs import plan_runs

    defaults = ["model_pair=tiny_llama", "budget.draft_length=2"]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=defaults + overrides)
    except HydraException as err:
        raise ConfigError(str(err)) from None
    return [(plan.method, plan.make_drafter()) for plan in plan_runs(cfg)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rsd.certify", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. drafter=rsd_s drafter.beam_width=2")
    ap.add_argument("--samples", type=int, default=2000, help="Monte Carlo decodes per sampling setting")
    ap.add_argument("--table-samples", type=int, default=1000, help="Monte Carlo decodes on the table models")
    ap.add_argument("--embedded", action="store_true", help="also check greedy identity on the embedded pair")
    ap.add_argument("--no-usefulness", action="store_true",
                    help=f"skip the usefulness report ({USEFUL_PROMPTS} prompts x {USEFUL_TOKENS} tokens on the "
                         "embedded pair)")
    ap.add_argument("--json", type=Path, help="also write the certificate(s) as JSON here")
    args = ap.parse_args(argv)
    if args.samples < 100 or args.table_samples < 100:
        ap.error("--samples and --table-samples must be at least 100 (a chi-square test needs expected counts >= 5)")
    if args.json is not None and not args.json.parent.is_dir():
        ap.error(f"--json {args.json}: the directory {args.json.parent} does not exist")
    torch.set_num_threads(1)

    try:
        drafters = compose_drafters(args.overrides)
    except RsdError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - the drafter's own code (its constructor, its shapes) raised
        print(f"error: building the drafter raised {type(err).__name__}: {one_line(err)}", file=sys.stderr)
        return 2
    certificates = []
    for name, drafter in drafters:
        cert = certify(name, drafter, args.samples, embedded=args.embedded, usefulness=not args.no_usefulness,
                       table_samples=args.table_samples)
        print(cert.render(), flush=True)
        certificates.append(cert)
    if args.json:
        try:
            args.json.write_text(json.dumps([{**asdict(c), "passed": c.passed} for c in certificates], indent=2,
                                            default=str))
        except OSError as err:
            print(f"error: --json {args.json}: cannot write it ({err.strerror}); the certificate is printed above",
                  file=sys.stderr)
            return 2
    print(f"false-alarm rate per Monte Carlo check: {FALSE_ALARM:g}")
    return 0 if all(c.passed for c in certificates) else 1


if __name__ == "__main__":
    sys.exit(main())
