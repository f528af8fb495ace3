"""`python -m rsd.certify` passes every built-in drafter and fails a drafter that breaks losslessness."""

import pytest

from helpers.trees import traversal_with
from rsd.certify import (
    MC_SAMPLING,
    Check,
    certify,
    compose_drafters,
    engine_exact_check,
    greedy_check,
    main,
    monte_carlo_check,
    usefulness_check,
)
from rsd.core.sampling import SamplingParams
from rsd.drafters import RSDC, SD, TV

BUILTIN = ["ar", "sd", "bv", "specinfer", "spectr", "rsd_c", "tv", "rsd_s", "pld", "eagle2"]


def check_certificate(name, sampling, *overrides, samples=2000):
    [(method, drafter)] = compose_drafters([f"drafter={name}", *overrides])
    cert = certify(method, drafter, samples=samples, sampling=sampling, table_samples=min(samples, 1000))
    print(cert.render())
    assert cert.passed, cert.render()
    verdicts = {c.name: c.passed for c in cert.checks}
    assert verdicts["greedy identity"] is True
    assert sum(1 for k, v in verdicts.items() if k.startswith("Monte Carlo T") and v) == len(sampling)
    assert verdicts["Monte Carlo tables"] is True
    assert verdicts["exact enumeration"] is (None if name == "ar" else True)
    assert verdicts["exact engine"] is not False and verdicts["draw helpers"] is True


@pytest.mark.parametrize("name", ["sd", "rsd_c", "rsd_s"])
def test_builtin_drafters_pass_monte_carlo(name):
    """The default tier's Monte Carlo: a chain, a tree and beams, 300 decodes at temperature 1 (the chi-square bound
    holds at any sample count); every drafter's full certificate (all oracles, 2000 decodes) is the slow test below."""
    [(_, drafter)] = compose_drafters([f"drafter={name}"])
    check = monte_carlo_check(drafter, MC_SAMPLING[0], samples=300)
    assert check.passed, check.summary


def test_greedy_identity_check_passes_a_builtin_drafter():
    [(_, drafter)] = compose_drafters(["drafter=rsd_c"])
    check = greedy_check(drafter, embedded=False)
    assert check.passed and check.details["equal"] == check.details["total"] > 0, check.summary


@pytest.mark.slow
def test_a_builtin_drafter_is_certified():
    """Every oracle, Monte Carlo at temperature 1 with 300 samples, through `certify`."""
    check_certificate("rsd_c", MC_SAMPLING[:1], "drafter.root_branching=2", samples=300)


NARROW = {"specinfer": "drafter.num_sequences=2", "spectr": "drafter.num_sequences=2",
          "rsd_c": "drafter.root_branching=2", "tv": "drafter.root_branching=2", "rsd_s": "drafter.beam_width=2"}


@pytest.mark.parametrize("name", BUILTIN)
def test_exact_engine_oracle_passes_every_builtin(name):
    """At two candidates per node (the default three i.i.d. candidates have too many outcomes to enumerate)."""
    [(_, drafter)] = compose_drafters([f"drafter={name}", *([NARROW[name]] if name in NARROW else [])])
    check = engine_exact_check(drafter)
    assert check.passed is True, check.summary


def test_exact_engine_says_when_a_shape_is_too_wide(monkeypatch):
    monkeypatch.setattr("rsd.certify.exact.ENGINE_MAX_RUNS", 50)
    [(_, drafter)] = compose_drafters(["drafter=spectr"])
    check = engine_exact_check(drafter)
    assert check.passed is None and "narrower shape" in check.summary


@pytest.mark.slow
@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_drafters_are_certified_with_filters(name):
    """The full certificate, with Monte Carlo with temperature, top-k and top-p (docs/algorithms.md#pitfalls 3), at
    two candidates per node (where the exact engine enumerates every outcome)."""
    check_certificate(name, MC_SAMPLING, *([NARROW[name]] if name in NARROW else []))


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


@pytest.mark.slow
def test_specinfer_trie_with_traversal_is_certified():
    """Traversal verification on the merged i.i.d. trie (siblings in first-appearance order, with the draft update)."""
    check_certificate("specinfer", MC_SAMPLING[:1], "+drafter.verifier=traversal", samples=300)


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
def test_exact_engine_fails_a_lossy_drafter(broken, first_engine_case):
    assert engine_exact_check(broken([2, 2])).passed is False


def test_exact_engine_passes_traversal_on_the_specinfer_trie():
    [(_, drafter)] = compose_drafters(["drafter=specinfer", "drafter.num_sequences=2", "+drafter.verifier=traversal"])
    assert engine_exact_check(drafter).passed is True


@pytest.mark.slow
@pytest.mark.parametrize("broken", [FixedDraftRSDC, TokenOrderRSDC, UnscaledResidualTV])
def test_certificate_fails_a_lossy_drafter(broken):
    cert = certify("broken", broken([2, 2]), samples=300, sampling=MC_SAMPLING[:1], table_samples=300)
    print(cert.render())
    assert not cert.passed
    assert {c.name: c.passed for c in cert.checks}["exact engine"] is False


def passing(name):
    return lambda *args: Check(name, True, "stubbed")


@pytest.mark.parametrize("lossy, code", [("", 0), (f"drafter._target_={__name__}.FixedDraftRSDC", 1)])
def test_cli_exit_codes(capsys, monkeypatch, first_engine_case, lossy, code):
    """The command line, with the exact engine oracle real and the others stubbed (each is tested on its own): 0 on a
    pass, 1 when an oracle fails, 2 on bad input. The whole real certificate is the slow test below."""
    for check in ("exact_check", "table_monte_carlo_check", "draw_helpers_check", "monte_carlo_check", "greedy_check"):
        monkeypatch.setattr(f"rsd.certify.suite.{check}", passing(check))
    assert main(["drafter=rsd_c", "drafter.root_branching=2", *([lossy] if lossy else []), "--no-usefulness"]) == code
    out = capsys.readouterr().out
    assert f"RESULT: {'PASS' if code == 0 else 'FAIL'}" in out and ("FAIL  exact engine" in out) == (code == 1)
    assert main(["drafter=nonexistent"]) == 2


@pytest.mark.slow
def test_cli_exit_codes_with_every_oracle(capsys):
    # usefulness: tests/certify/test_example.py
    assert main(["drafter=sd", "--samples", "300", "--table-samples", "300", "--no-usefulness"]) == 0
    assert "RESULT: PASS" in capsys.readouterr().out
    assert main(["drafter=nonexistent"]) != 0


class RaisesInShapes(SD):
    @classmethod
    def shapes(cls, budget, params):
        raise RuntimeError("my shapes\nhave a bug")


class RaisesInBuild(SD):
    def build(self, tree, ctx):
        raise KeyError("my build has a bug")


def test_an_error_in_the_drafters_code_is_one_line_not_a_traceback(capsys):
    assert main(["drafter=sd", f"drafter._target_={__name__}.RaisesInShapes", "--no-usefulness"]) == 2
    err = capsys.readouterr().err
    assert "could not list its shapes" in err and "RuntimeError: my shapes have a bug (at test_certify.py:" in err
    assert len(err.strip().splitlines()) == 1
    report = usefulness_check("broken", RaisesInBuild(2), model_pair="tiny_llama", prompts=1, max_new_tokens=4)
    assert "broken raised KeyError: 'my build has a bug' (at test_certify.py:" in report.render()
