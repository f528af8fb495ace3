"""A known-lossy verifier plug-in (examples/medusa_typical: Medusa's typical acceptance) is failed by the certificate,
which says how far from the target its output is (total variation): how the harness judges a claim of losslessness."""

import pytest

from helpers.config import ROOT
from rsd.certify import MC_SAMPLING, compose_drafters, engine_exact_check, monte_carlo_check

EXAMPLE = ROOT / "examples" / "medusa_typical"


@pytest.fixture
def typical_eagle2(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    [(method, drafter)] = compose_drafters(["drafter=eagle2", "+drafter.verifier=typical.TypicalAcceptance"])
    return method, drafter


def test_the_exact_engine_oracle_fails_typical_acceptance(typical_eagle2):
    method, drafter = typical_eagle2
    check = engine_exact_check(drafter)
    assert method == "eagle2+typical.TypicalAcceptance"
    assert check.passed is False and "max TV(engine, target) = " in check.summary
    assert float(check.summary.split("max TV(engine, target) = ")[1].split(",")[0]) > 0.1


def test_monte_carlo_fails_typical_acceptance_and_reports_its_distance(typical_eagle2):
    _, drafter = typical_eagle2
    check = monte_carlo_check(drafter, MC_SAMPLING[0], samples=300)
    assert check.passed is False and "TV = " in check.summary, check.summary
