"""`python -m rsd.certify` passes every built-in drafter and fails a drafter that breaks losslessness."""

import pytest
from test_verifiers import traversal_with

from rsd.certify import MC_SAMPLING, certify, compose_drafters, main, monte_carlo_check
from rsd.drafters import RSDC, TV
from rsd.sampling import SamplingParams

BUILTIN = ["ar", "sd", "bv", "specinfer", "spectr", "rsd_c", "tv", "rsd_s"]


def check_certificate(name, sampling, *overrides):
    [(method, drafter)] = compose_drafters([f"drafter={name}", *overrides])
    cert = certify(method, drafter, samples=2000, sampling=sampling)
    print(cert.render())
    assert cert.passed, cert.render()
    verdicts = {c.name: c.passed for c in cert.checks}
    assert verdicts["greedy identity"] is True
    assert sum(1 for k, v in verdicts.items() if k.startswith("Monte Carlo") and v) == len(sampling)
    assert verdicts["exact enumeration"] is (None if name == "ar" else True)


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_drafters_are_certified(name):
    """Exact enumeration, Monte Carlo at temperature 1, greedy identity."""
    check_certificate(name, MC_SAMPLING[:1])


@pytest.mark.slow
@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_drafters_are_certified_with_filters(name):
    """The full certificate, with Monte Carlo with temperature, top-k and top-p (docs/algorithms.md#pitfalls 3)."""
    check_certificate(name, MC_SAMPLING)


@pytest.mark.parametrize("name, params", [
    ("rsd_c", SamplingParams(0.7, top_k=2, top_p=0.9)),  # top-k 2 < 3 root branches: the root drafts fewer
    ("spectr", SamplingParams(1.3, top_k=5, top_p=0.8)),
])
def test_certified_at_other_temperatures_with_filters(name, params):
    """Fast default-suite Monte Carlo away from T = 1 (where a missing temperature changes nothing) with top-k and
    top-p biting: a target law processed with other settings puts samples outside the filtered support. The full
    2000-sample certificate with filters is the slow test above."""
    [(_, drafter)] = compose_drafters([f"drafter={name}"])
    check = monte_carlo_check(drafter, params, samples=200)
    assert check.passed, check.summary


def test_specinfer_trie_with_traversal_is_certified():
    """Traversal verification on the merged i.i.d. trie (siblings in first-appearance order, with the draft update)."""
    check_certificate("specinfer", MC_SAMPLING[:1], "+drafter.verifier=traversal")


class FixedDraftRSDC(RSDC):
    """Pitfall 1 of docs/algorithms.md#pitfalls: without-replacement drafts verified with SpecInfer's fixed-p update."""

    rule = "specinfer"


class TokenOrderRSDC(RSDC):
    """Pitfall 2: distinct drafts tried in token-id order instead of draw order."""

    def build(self, tree, ctx):
        super().build(tree, ctx)
        for v in tree.candidates:
            tree.candidates[v] = sorted(tree.candidates[v], key=lambda c: tree.tokens[c])


class UnscaledResidualTV(TV):
    """A §9 Traversal bug: the parent's residual not scaled by its weight."""

    verifier = traversal_with(residual=lambda self, b: (self.row(b) - self.P[b]).clamp_min(0))


@pytest.mark.parametrize("broken", [FixedDraftRSDC, TokenOrderRSDC, UnscaledResidualTV])
def test_certificate_fails_a_lossy_drafter(broken):
    cert = certify("broken", broken([3, 2]), samples=2000, sampling=MC_SAMPLING[:1])
    print(cert.render())
    assert not cert.passed
    assert any(c.name.startswith("Monte Carlo") and c.passed is False for c in cert.checks)


def test_cli_exit_codes(capsys):
    assert main(["drafter=sd", "--samples", "300", "--no-usefulness"]) == 0  # usefulness: tests/test_example.py
    assert "RESULT: PASS" in capsys.readouterr().out
    assert main(["drafter=nonexistent"]) != 0
