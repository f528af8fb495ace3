"""A drafter from outside the package (examples/topk_tree): one class plus one YAML, certified and run."""

import sys

import pytest

from helpers import ROOT, compose_cfg
from rsd.certify import MC_SAMPLING, certify, compose_drafters
from rsd.errors import ConfigError
from rsd.runner import plan_runs, run

EXAMPLE = ROOT / "examples" / "topk_tree"
SEARCH = f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]"


@pytest.fixture
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield
    sys.modules.pop("topk_tree", None)


def test_user_drafter_is_certified_and_runs(example_on_path, tmp_path):
    [(name, drafter)] = compose_drafters(["drafter=topk_tree", SEARCH])
    cert = certify(name, drafter, samples=2000, sampling=MC_SAMPLING[:1])
    assert cert.passed, cert.render()
    assert next(c for c in cert.checks if c.name == "exact enumeration").passed is True
    [summary] = run(compose_cfg("drafter=topk_tree", SEARCH, "model_pair=tiny_llama", "dataset.num_prompts=2",
                                "sampling.max_new_tokens=8", f"out_dir={tmp_path}"))
    assert summary["method"] == "topk_tree" and summary["shape_tag"] == "b3-1-1-1"


def test_user_drafter_not_importable_is_a_clear_error():
    with pytest.raises(ConfigError, match="PYTHONPATH"):
        plan_runs(compose_cfg("drafter=topk_tree", SEARCH))
