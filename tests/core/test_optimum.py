"""The optimum at a node (docs/algorithms.md#optimum): alpha* equals the coupling linear program on small vocabularies,
the sorted prefixes reach the minimum over all token sets, the without-replacement bracket is tight and its quadrature
converges, and no built-in verifier's expected root acceptance exceeds alpha* (SD reaches it)."""

import itertools
import math
from functools import partial

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

import rsd.core.optimum
from rsd.certify.outcomes import enumerate_outcomes
from rsd.certify.prefix_laws import PrefixLaws, draft_chain, draft_iid_trie, draft_without_replacement, target_rows
from rsd.core.engine import Engine
from rsd.core.metrics import summarize_records
from rsd.core.optimum import _log_elementary, iid_optimum, root_optimum, wor_optimum, wor_optimum_bounds
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import BV, RSDC, SD, SpecTr
from rsd.models.adapter import CausalLM
from rsd.models.tiny import tiny_pair
from rsd.verify import get_verifier


def candidate_law(p: list[float], k: int, scheme: str) -> list[tuple[tuple[int, ...], float]]:
    """Every ordered candidate tuple with its probability (i.i.d., or sequential draws without replacement)."""
    support = [i for i, x in enumerate(p) if x > 0]
    if scheme == "iid":
        return [(c, math.prod(p[i] for i in c)) for c in itertools.product(support, repeat=k)]
    out = []
    for c in itertools.permutations(support, k):
        prob, left = 1.0, list(support)
        for i in c:
            prob *= p[i] / sum(p[j] for j in left)
            left.remove(i)
        out.append((c, prob))
    return out


def coupling_lp(p: list[float], q: list[float], k: int, scheme: str) -> float:
    """max P(Y in C) over partial couplings of the candidates C and Y ~ q (mass pi(c, y) for y in c; every
    partial coupling completes to a full one without lowering the objective)."""
    law = candidate_law(p, k, scheme)
    pairs = [(a, y) for a, (c, _) in enumerate(law) for y in sorted(set(c))]
    a_ub = np.zeros((len(law) + len(q), len(pairs)))
    for n, (a, y) in enumerate(pairs):
        a_ub[a, n] = a_ub[len(law) + y, n] = 1
    res = linprog(-np.ones(len(pairs)), A_ub=a_ub, b_ub=[w for _, w in law] + list(q), method="highs")
    assert res.status == 0, res.message
    return -res.fun


def all_sets_min(p: list[float], q: list[float], k: int, scheme: str) -> float:
    """min over every token set H of q(H) + 1 - P(C subset of H), by brute force."""
    law = [(set(c), w) for c, w in candidate_law(p, k, scheme)]
    return min(sum(q[i] for i in h) + 1 - sum(w for c, w in law if c <= set(h))
               for r in range(len(p) + 1) for h in itertools.combinations(range(len(p)), r))


def random_laws(n: int, seed: int, vocab=(3, 5)):
    """(p, q) float64 pairs: Dirichlet laws of varied sharpness, some with a zero in p or q."""
    gen = np.random.default_rng(seed)
    for i in range(n):
        v = int(gen.integers(vocab[0], vocab[1] + 1))
        p, q = (gen.dirichlet(np.full(v, gen.choice([0.3, 1.0, 3.0]))) for _ in range(2))
        if i % 3 == 0:
            p[gen.integers(v)] = 0
        if i % 4 == 0:
            q[gen.integers(v)] = 0
        p, q = p / p.sum(), q / q.sum()
        yield torch.tensor(p), torch.tensor(q)


@pytest.mark.parametrize("scheme", ["iid", "without_replacement"])
def test_formula_equals_the_coupling_linear_program(scheme):
    """On vocabularies of 3-5 tokens, K = 1-3, to 1e-9 (the without-replacement bracket is then a single value)."""
    for p, q in random_laws(30, seed=1):
        for k in range(1, min(3, int((p > 0).sum())) + 1):
            lp = coupling_lp(p.tolist(), q.tolist(), k, "iid" if scheme == "iid" else "wor")
            assert abs(root_optimum(p, q, k, scheme) - lp) < 1e-9
            if scheme == "without_replacement" and k > 1:
                lower, upper, _ = wor_optimum_bounds(p, q, k)
                assert lower == pytest.approx(upper, abs=1e-9)


def test_sorted_prefixes_reach_the_minimum_over_all_token_sets():
    """The without-replacement minimiser is a p/q-sorted prefix on every random case (vocabulary 3-6, K = 2-4); the
    i.i.d. one is by the exchange argument."""
    for p, q in random_laws(60, seed=2, vocab=(3, 6)):
        for k in range(2, min(4, int((p > 0).sum())) + 1):
            assert abs(wor_optimum(p, q, k) - all_sets_min(p.tolist(), q.tolist(), k, "wor")) < 1e-9
            assert abs(iid_optimum(p, q, k) - all_sets_min(p.tolist(), q.tolist(), k, "iid")) < 1e-12


def test_single_candidate_is_one_minus_total_variation():
    for p, q in random_laws(20, seed=3, vocab=(3, 50)):
        assert root_optimum(p, q, 1, "single") == pytest.approx(1 - 0.5 * float((p - q).abs().sum()), abs=1e-12)


def test_without_replacement_bracket_on_a_large_vocabulary():
    """V = 4000 peaked laws (pooled tokens): lower <= upper within 5e-3, the i.i.d. optimum below both, and the
    log-t trapezoid converged (step vs half step) to 1e-6."""
    gen = torch.Generator().manual_seed(4)
    for k in (2, 4, 8):
        p = torch.softmax(3 * torch.randn(4000, generator=gen, dtype=torch.float64), 0)
        q = torch.softmax(3 * torch.randn(4000, generator=gen, dtype=torch.float64), 0)
        q = 0.5 * q + 0.5 * p
        lower, upper, err = wor_optimum_bounds(p, q, k)
        assert iid_optimum(p, q, k) <= lower + 1e-12 <= upper + 1e-12 <= lower + 5e-3
        assert err < 1e-6
        assert wor_optimum(p, q, k) == upper


def brute_log_elementary(log_r: list[float], j: int) -> float:
    """log e_j(r_1..r_b) as a log-sum-exp over every j-subset, from log r_i."""
    sums = [sum(c) for c in itertools.combinations(log_r, j)]
    if not sums:
        return -math.inf
    top = max(sums)
    return top + math.log(math.fsum(math.exp(x - top) for x in sums))


def test_race_counts_match_brute_force_in_both_float_ranges():
    """log e_j(e^{t m} - 1) over every prefix equals a sum over token subsets, for times on both sides of the switch
    from plain to log-sum-exp cumulative sums (sum t m = 700) and far beyond, where e^{t m} overflows float64."""
    mass = torch.tensor([0.3, 0.05, 0.4, 0.15, 0.1], dtype=torch.float64)
    t = torch.tensor([1e-3, 0.5, 20.0, 699.0, 701.0, 5e3, 1e5], dtype=torch.float64)
    got = _log_elementary(t[:, None] * mass[None, :], torch.ones(5, dtype=torch.bool), 4)
    for row, time in enumerate(t.tolist()):
        log_r = [x + math.log1p(-math.exp(-x)) if x > 1 else math.log(math.expm1(x)) for x in (time * mass).tolist()]
        for b in range(6):
            for j in range(4):
                want = brute_log_elementary(log_r[:b], j)
                assert got[j, row, b] == (want if want == -math.inf else pytest.approx(want, rel=1e-12, abs=1e-12))


def test_quadrature_grid_and_step_meet_their_error_bounds(monkeypatch):
    """The default grid (each tail cut where it holds < 1e-13) and step agree to 1e-10 with a grid whose tails hold
    < 1e-30 and an eighth of the step, on V = 4000 peaked laws and small random ones, K = 2-8."""
    gen = torch.Generator().manual_seed(5)
    cases = []
    for k in (2, 4, 8):
        p = torch.softmax(3 * torch.randn(4000, generator=gen, dtype=torch.float64), 0)
        q = torch.softmax(3 * torch.randn(4000, generator=gen, dtype=torch.float64), 0)
        cases += [(p, 0.5 * q + 0.5 * p, k), (p, 0.9 * p + 0.1 * q, k)]
    cases += [(p, q, 2) for p, q in random_laws(10, seed=6, vocab=(4, 8))]
    default = [wor_optimum(p, q, k) for p, q, k in cases]
    monkeypatch.setattr(rsd.core.optimum, "_TAIL", 1e-30)
    for (p, q, k), value in zip(cases, default):
        assert value == pytest.approx(wor_optimum(p, q, k, step=0.25 / 8), abs=1e-10)


CASES = [
    ("walk", "single", partial(draft_chain, length=2), "sd"),
    ("block", "single", partial(draft_chain, length=3), "sd"),
    ("walk", "without_replacement", partial(draft_without_replacement, branching=[2, 1]), "rsd"),
    ("walk", "without_replacement", partial(draft_without_replacement, branching=[3]), "rsd"),
    ("traversal", "without_replacement", partial(draft_without_replacement, branching=[2, 2]), "rsd"),
    ("walk", "iid", partial(draft_iid_trie, k=2, length=2), "specinfer"),
    ("walk", "iid", partial(draft_iid_trie, k=3, length=1), "kseq"),
    ("traversal", "iid", partial(draft_iid_trie, k=2, length=2), "specinfer"),
]


@pytest.mark.parametrize("verifier,scheme,draft,rule", CASES)
def test_no_verifier_beats_the_optimum(verifier, scheme, draft, rule):
    """E[root acceptance] over the exactly enumerated drafts <= alpha* (a theorem: a violation is a bug); the SD
    walk and Block verification reach it at K = 1."""
    v = get_verifier(verifier)
    for seed, kind in enumerate(("random", "sparse", "disjoint", "random")):
        laws = PrefixLaws(4, seed, kind)
        outcomes = enumerate_outcomes(lambda coins, laws=laws: draft(laws, coins))
        mean = sum(w * v.root_acceptance(tree, target_rows(tree, laws), rule) for tree, w in outcomes)
        tree = outcomes[0][0]
        bound = root_optimum(tree.draft_probs[0], laws.q(()), len(tree.candidates[0]), scheme)
        assert mean <= bound + 1e-12
        if scheme == "single":
            assert mean == pytest.approx(bound, abs=1e-12)


@pytest.mark.parametrize("verifier,draft,rule", [(v, d, r) for v, _, d, r in CASES])
def test_root_acceptance_reused_from_expected_yield_only_for_the_same_tree(verifier, draft, rule):
    """root_acceptance right after expected_yield on a tree equals a fresh verifier's value, and after expected_yield
    on another tree it is not the other tree's value."""
    laws = PrefixLaws(4, 0)
    trees = [(tree, target_rows(tree, laws)) for tree, _ in enumerate_outcomes(lambda coins: draft(laws, coins))]
    fresh = [get_verifier(verifier).root_acceptance(tree, q, rule) for tree, q in trees]
    v = get_verifier(verifier)
    for (tree, q), value in zip(trees, fresh):
        v.expected_yield(tree, q, frozenset(), rule)
        assert v.root_acceptance(tree, q, rule) == pytest.approx(value, abs=1e-12)
    other = next(i for i, value in enumerate(fresh) if abs(value - fresh[-1]) > 1e-6)
    assert v.root_acceptance(*trees[other], rule) == pytest.approx(fresh[other], abs=1e-12)


def test_a_verifier_accepting_more_than_lossless_fails():
    """A planted over-accepting root rule (accept the candidate whenever q > 0) exceeds alpha*: the check can fail."""
    laws = PrefixLaws(4, 0)
    outcomes = enumerate_outcomes(lambda coins: draft_chain(laws, coins, length=1))
    greedy = sum(w * float(target_rows(t, laws)[0, t.tokens[1]] > 0) for t, w in outcomes)
    assert greedy > root_optimum(outcomes[0][0].draft_probs[0], laws.q(()), 1, "single") + 0.05


@pytest.mark.parametrize("drafter", [SD(3), BV(3), SpecTr(2, 2), RSDC([3, 1])])
def test_engine_records_root_optimum_and_summary_means(drafter):
    """Every drafting step records alpha* >= 0 and an acceptance in [0, 1]; the summary carries their means and
    ratio (AR and records without them give None)."""
    target, draft = tiny_pair("opt", vocab_size=16, seed=0, init_std=0.5)
    engine = Engine(CausalLM(target), CausalLM(draft), drafter, SamplingParams(), [], 16)
    out = engine.generate([1, 2, 3], 12, prompt_generator(0, "p", torch.device("cpu")))
    assert len(out.root_optimum) == len(out.root_acceptance) == len(out.accepted_lengths)
    steps = [(o, a) for o, a in zip(out.root_optimum, out.root_acceptance) if o is not None]
    assert steps and all(0 <= o <= 1 and 0 <= a <= 1 for o, a in steps)
    record = {"new_tokens": len(out.new_token_ids), "target_calls": out.target_calls, "draft_calls": out.draft_calls,
              "wall_s": 1.0, "time_draft_s": 0, "time_target_s": 0, "time_other_s": 0,
              "accepted_lengths": out.accepted_lengths, "tokens_verified": out.tokens_verified,
              "expected_emitted": out.expected_emitted, "root_optimum": out.root_optimum,
              "root_acceptance": out.root_acceptance}
    summary = summarize_records([record], 1, 1)
    assert summary["root_optimum"] == pytest.approx(sum(o for o, _ in steps) / len(steps))
    assert summary["fraction_of_optimum"] == pytest.approx(sum(a for _, a in steps) / sum(o for o, _ in steps))
    old = {k: v for k, v in record.items() if k not in ("root_optimum", "root_acceptance")}
    assert summarize_records([old], 1, 1)["fraction_of_optimum"] is None
