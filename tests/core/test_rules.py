"""Exact enumeration at one node (docs/algorithms.md#oracles): every rule's output law equals q to 1e-12, and the
pitfalls (fixed p for distinct drafts; token-id order) fail the same oracle — proof that it can fail."""

import itertools

import pytest
import torch

from rsd.certify import random_laws
from rsd.certify.outcomes import candidate_draws, node_output_law
from rsd.core.rules import kseq_rho, kseq_rule, onehot_rule, residual, rsd_rule, sd_rule, specinfer_rule

CASES = [(vocab, m, seed) for vocab in (2, 5, 8) for m in (1, 2, 3, 4) for seed in range(3) if vocab ** m <= 1024]
CASES.append((8, 4, 0))  # the largest case (4096 ordered draws), once


@pytest.mark.parametrize("vocab,m,seed", CASES)
def test_specinfer_iid_is_exact(vocab, m, seed):
    q, p = random_laws(vocab, seed)
    assert torch.allclose(node_output_law("specinfer", q, p, m, "iid"), q, atol=1e-12, rtol=0)


@pytest.mark.parametrize("vocab,m,seed", CASES)
def test_kseq_iid_is_exact(vocab, m, seed):
    q, p = random_laws(vocab, seed)
    assert torch.allclose(node_output_law("kseq", q, p, m, "iid"), q, atol=1e-12, rtol=0)


@pytest.mark.parametrize("vocab,m,seed", CASES)
def test_rsd_without_replacement_is_exact(vocab, m, seed):
    q, p = random_laws(vocab, seed)
    assert torch.allclose(node_output_law("rsd", q, p, m, "without_replacement"), q, atol=1e-12, rtol=0)


@pytest.mark.parametrize("vocab,seed", [(v, s) for v in (2, 5, 8) for s in range(5)])
def test_sd_is_exact(vocab, seed):
    q, p = random_laws(vocab, seed)
    assert torch.allclose(node_output_law("sd", q, p, 1, "single"), q, atol=1e-12, rtol=0)


@pytest.mark.parametrize("rule,scheme,m", [("sd", "single", 1), ("specinfer", "iid", 3), ("kseq", "iid", 3),
                                           ("rsd", "without_replacement", 3)])
def test_rules_exact_with_truncated_draft_support(rule, scheme, m):
    """A draft masked by top-k/top-p (fewer tokens with mass than candidates) stays exact."""
    q, p = random_laws(8, 11, support=2)
    assert torch.allclose(node_output_law(rule, q, p, m, scheme), q, atol=1e-12, rtol=0)


@pytest.mark.parametrize("rule,scheme,m", [("sd", "single", 1), ("specinfer", "iid", 2), ("kseq", "iid", 3),
                                           ("rsd", "without_replacement", 2)])
def test_rules_exact_for_one_hot_laws(rule, scheme, m):
    """Greedy decoding: one-hot q and p, equal or different."""
    for qi, pi in itertools.product(range(3), repeat=2):
        q, p = torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
        q[qi], p[pi] = 1, 1
        assert torch.allclose(node_output_law(rule, q, p, m, scheme), q, atol=1e-12, rtol=0)


def test_onehot_rule_is_exact_for_deterministic_distinct_candidates():
    q, _ = random_laws(6, 3)
    for cands in itertools.permutations(range(6), 3):
        p = torch.zeros(6, dtype=torch.float64)
        p[cands[0]] = 1.0  # the drafter's choice is deterministic: its law is a point mass on the tuple
        node = onehot_rule(q, p, torch.tensor(cands))
        law, reach = torch.zeros(6, dtype=torch.float64), 1.0
        for c, a in zip(cands, node.accept_probs().tolist()):
            law[c] += reach * a
            reach *= 1 - a
        law += reach * node.residual
        assert torch.allclose(law, q, atol=1e-12, rtol=0)


# --- pitfalls (docs/algorithms.md#pitfalls): each must fail the oracle ------------------------------------------------

def fixed_p_rule(q, p, candidates):
    """Pitfall 1: SpecInfer's update (fixed p) applied to without-replacement candidates."""
    return specinfer_rule(q, p, candidates)


def token_order_rule(q, p, candidates):
    """Pitfall 2: distinct candidates verified in token-id order instead of draw order."""
    return rsd_rule(q, p, candidates.sort().values)


@pytest.mark.parametrize("pitfall", [fixed_p_rule, token_order_rule])
def test_pitfalls_fail_the_oracle(pitfall):
    failures = 0
    for vocab, m, seed in [(5, 2, 0), (5, 3, 1), (8, 2, 2), (8, 3, 3)]:
        q, p = random_laws(vocab, seed)
        law = node_output_law(pitfall, q, p, m, "without_replacement")
        assert torch.allclose(law.sum(), torch.tensor(1.0, dtype=torch.float64), atol=1e-12)  # still a distribution...
        failures += not torch.allclose(law, q, atol=1e-12, rtol=0)  # ...but not q
    assert failures == 4


def test_kseq_rho_bracket_and_short_form():
    """rho* lies in [1, k] with f(rho*) <= 0; at rho* the residual equals (q - rho* p)+ up to bisection precision."""
    q, p = random_laws(8, 5)
    for k in (1, 2, 3, 4):
        rho = kseq_rho(q, p, k)
        beta = torch.minimum(p, q / rho).sum()
        assert 1.0 <= rho <= k
        assert 1 - (1 - beta) ** k - rho * beta <= 1e-12
        gamma = (1 - (1 - beta) ** k) / beta
        assert gamma <= rho + 1e-12
        short = residual(q, rho * p)
        assert torch.allclose(kseq_rule(q, p, torch.arange(k)).residual, short, atol=1e-9)


def test_acceptance_probabilities_match_closed_forms():
    """P(accept) at a node: sum min(p, q) for SD, 1 - (1 - beta(rho*))^k for K-SEQ."""
    q, p = random_laws(6, 7)
    sd_accept = sum(prob * float(sd_rule(q, p, torch.tensor(c)).accept_probs()[0])
                    for c, prob in candidate_draws(p, 1, "single"))
    assert abs(sd_accept - float(torch.minimum(p, q).sum())) < 1e-12
    k = 3
    total = 0.0
    for c, prob in candidate_draws(p, k, "iid"):
        a, reach = kseq_rule(q, p, torch.tensor(c)).accept_probs(), 1.0
        for aj in a.tolist():
            total += prob * reach * aj
            reach *= 1 - aj
    rho = kseq_rho(q, p, k)
    assert abs(total - float(1 - (1 - torch.minimum(p, q / rho).sum()) ** k)) < 1e-9
