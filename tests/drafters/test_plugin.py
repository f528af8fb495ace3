"""A drafter from outside the package (examples/topk_tree): one class plus one YAML, certified and run."""

import re
import sys

import pytest
import torch

from helpers.config import ROOT, run_cfg
from rsd.certify import MC_SAMPLING, certify, compose_drafters, engine_exact_check, exact_check
from rsd.certify.exact_engine import ContextTables, TableLM
from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams
from rsd.core.tree import DraftTree
from rsd.drafters import SD
from rsd.errors import ConfigError
from rsd.harness.runner import run
from rsd.harness.runs import plan_runs
from rsd.verify.base import get_verifier
from rsd.verify.contract import VerifierContractError
from rsd.verify.walk import Walk

EXAMPLE = ROOT / "examples" / "topk_tree"
SEARCH = f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]"


@pytest.fixture
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield
    sys.modules.pop("topk_tree", None)


@pytest.mark.slow
def test_user_drafter_is_certified(example_on_path):
    [(name, drafter)] = compose_drafters(["drafter=topk_tree", SEARCH])
    cert = certify(name, drafter, samples=300, sampling=MC_SAMPLING[:1], table_samples=300)
    assert cert.passed, cert.render()
    assert next(c for c in cert.checks if c.name == "exact enumeration").passed is True


def test_user_drafter_passes_the_exact_oracles_and_runs(example_on_path, tmp_path):
    """The oracles that see any lossy tree exactly (the full certificate, with Monte Carlo, is the slow test above)."""
    [(name, drafter)] = compose_drafters(["drafter=topk_tree", SEARCH])
    for check in (engine_exact_check(drafter), exact_check(drafter)):
        assert check.passed is True, check.summary
    [summary] = run(run_cfg("drafter=topk_tree", SEARCH, "model_pair=tiny_llama", "dataset.num_prompts=2",
                            "sampling.max_new_tokens=8", f"out_dir={tmp_path}"))
    assert summary["method"] == "topk_tree" and summary["shape_tag"] == "b3-1-1-1"


def test_user_drafter_not_importable_is_a_clear_error():
    with pytest.raises(ConfigError, match="PYTHONPATH"):
        plan_runs(run_cfg("drafter=topk_tree", SEARCH))


class FixedLaws:
    """A DraftContext stand-in: every node's draft law is `law`; `max_depth` caps the levels (the last step)."""

    def __init__(self, law, max_depth=None):
        self.law, self.max_depth = law, max_depth

    def probs(self, tree, nodes):
        for v in nodes:
            tree.draft_probs[v] = self.law
        return self.law.expand(len(nodes), -1)


def test_example_drafts_the_most_likely_tokens(example_on_path):
    """Children are the b most likely token ids, most likely first (not the masses read as ids: issue 9), never a
    zero-mass token, and no level beyond ctx.max_depth."""
    from topk_tree import TopKTree

    law = torch.tensor([0.0, 0.05, 0.5, 0.0, 0.3, 0.15])
    tree = DraftTree.with_root(7)
    TopKTree([3, 1]).build(tree, FixedLaws(law))
    assert [tree.tokens[c] for c in tree.candidates[0]] == [2, 4, 5]
    assert [[tree.tokens[c] for c in tree.candidates[v]] for v in tree.candidates[0]] == [[2], [2], [2]]
    tree = DraftTree.with_root(7)
    TopKTree([5]).build(tree, FixedLaws(law))
    assert [tree.tokens[c] for c in tree.candidates[0]] == [2, 4, 5, 1]  # 4 tokens have mass
    tree = DraftTree.with_root(7)
    TopKTree([2, 2, 2]).build(tree, FixedLaws(law, max_depth=1))
    assert tree.depth == 1


class ExtraToken(Walk):
    """Emits one token more than the contract allows (a token that was never drafted nor drawn as the bonus)."""

    def verify(self, tree, q, coins, eos, rule):
        path, emitted = super().verify(tree, q, coins, eos, rule)
        return path, emitted + [emitted[-1]]


class NoSuchNode(Walk):
    def verify(self, tree, q, coins, eos, rule):
        return [len(tree) + 998], [0, 0]


class NothingAtAll(Walk):
    def verify(self, tree, q, coins, eos, rule):
        return [], []


class NegativeYield(Walk):
    def expected_yield(self, tree, q, eos, rule):
        return -1e300


class ShrunkYield(Walk):
    """A plausible but wrong expected yield: 0.9 x the walk's + 0.1 stays in [1, depth + 1]."""

    def expected_yield(self, tree, q, eos, rule):
        return 0.9 * super().expected_yield(tree, q, eos, rule) + 0.1


def sd_verified_by(name):
    class SDWith(SD):
        verifier = f"{__name__}.{name}"
    return SDWith(2)


@pytest.mark.parametrize("bad", ["ExtraToken", "NoSuchNode", "NothingAtAll", "NegativeYield"])
def test_engine_checks_every_verifier_output_against_the_contract(bad):
    tables = ContextTables(3, 0)
    engine = Engine(TableLM(tables, 0), TableLM(tables, 1), sd_verified_by(bad), SamplingParams(1.0), [], 3)
    with pytest.raises(VerifierContractError, match=f"verifier '{__name__}.{bad}'") as err:
        engine.generate([0], 6, torch.Generator().manual_seed(0))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("bad", ["NegativeYield", "ShrunkYield"])
def test_certify_checks_the_expected_yield_against_the_enumerated_mean(bad):
    check = engine_exact_check(sd_verified_by(bad))
    assert check.passed is False and "expected_yield" in check.summary


def test_a_callable_that_is_not_a_verifier_is_refused():
    with pytest.raises(ConfigError, match=r"drafter.verifier='builtins.print' is not a Verifier"):
        get_verifier("builtins.print")
    assert get_verifier(f"{__name__}.ShrunkYield").name == "walk"


def test_the_guides_class_snippet_runs_as_written():
    """docs/adding_a_drafter.md section 1: the snippet, pasted alone into a fresh namespace, defines a drafter."""
    section = (ROOT / "docs" / "adding_a_drafter.md").read_text().split("## 1.", 1)[1].split("## 2.", 1)[0]
    [snippet] = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict = {}
    exec(compile(snippet, "adding_a_drafter.md", "exec"), namespace)
    tree = DraftTree.with_root(7)
    namespace["TopKTree"]([2, 1]).build(tree, FixedLaws(torch.tensor([0.1, 0.6, 0.3])))
    assert [tree.tokens[c] for c in tree.candidates[0]] == [1, 2]
