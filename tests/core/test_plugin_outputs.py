"""A plug-in drafter's or verifier's bad output is one contract line naming the plug-in (issue 34), never an
IndexError, TypeError or JSON error mid-run; what a config can show before any model loads is refused there."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from helpers.config import compose_cfg
from rsd.certify.exact_engine import ContextTables, TableLM
from rsd.core.engine import Engine
from rsd.core.plugin import PluginError
from rsd.core.sampling import SamplingParams
from rsd.core.tree import DraftTree
from rsd.drafters import SD
from rsd.drafters.base import DraftContext
from rsd.drafters.contract import DrafterContractError
from rsd.errors import ConfigError
from rsd.harness.config import resolve_config
from rsd.verify.contract import VerifierContractError
from rsd.verify.walk import Walk

VOCAB = 3
MODULE = "rsd_hostile_plugins"  # the plug-ins below, importable by dotted path
plugins = types.ModuleType(MODULE)
sys.modules[MODULE] = plugins


def plugin(cls: type) -> type:
    setattr(plugins, cls.__name__, cls)
    cls.__module__ = MODULE
    return cls


def drafting(token: object) -> type[SD]:
    class Drafts(SD):
        name = "hostile"

        def build(self, tree: DraftTree, ctx: DraftContext) -> None:
            ctx.probs(tree, [0])
            tree.add_candidate(0, token)

    return Drafts


def verifying(**methods) -> type[SD]:
    bad = plugin(type(f"Bad{len(vars(plugins))}", (Walk,), methods))

    class Verified(SD):
        name = "hostile"
        verifier = f"{MODULE}.{bad.__name__}"

    return Verified


def generate(drafter: SD) -> None:
    tables = ContextTables(VOCAB, 0, "close")
    Engine(TableLM(tables, 0), TableLM(tables, 1), drafter, SamplingParams(1.0), [], VOCAB).generate(
        [0], 6, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("token", [-1, VOCAB, 1.0, torch.tensor(1), True, None], ids=repr)
def test_a_drafted_token_that_is_not_an_int_in_the_vocabulary_is_named(token):
    with pytest.raises(DrafterContractError, match=r"drafter 'hostile' drafted token .* must be a Python int in"):
        generate(drafting(token)(2))


@pytest.mark.parametrize("error", [RuntimeError("boom"), ZeroDivisionError("division by zero")], ids=repr)
def test_a_build_that_raises_is_one_line_naming_the_drafter(error):
    class Raises(SD):
        name = "hostile"

        def build(self, tree, ctx):
            raise error

    with pytest.raises(PluginError, match=rf"drafter 'hostile' build raised {type(error).__name__}: ") as info:
        generate(Raises(2))
    assert "\n" not in str(info.value) and info.value.__cause__ is error


def walk_verify(self, tree, q, coins, eos, rule):
    return Walk.verify(self, tree, q, coins, eos, rule)


@pytest.mark.parametrize(("methods", "error", "match"), [
    ({"verify": lambda self, *a: None}, VerifierContractError, r"returned None from verify; it must return"),
    ({"verify": lambda self, *a: 1 / 0}, PluginError, r"verify raised ZeroDivisionError"),
    ({"verify": lambda self, *a: ([True], [True, 0])}, VerifierContractError, r"breaks its contract"),
    ({"verify": lambda self, tree, q, c, e, r: ([], [torch.tensor(0)])}, VerifierContractError, r"not a bool or a"),
    ({"expected_yield": lambda self, *a: "1.5"}, VerifierContractError, r"expected_yield returned '1.5' \(str\)"),
    ({"expected_yield": lambda self, *a: None}, VerifierContractError, r"expected_yield returned None"),
    ({"expected_yield": lambda self, *a: torch.tensor(1.5)}, VerifierContractError, r"\(Tensor\); it must return"),
    ({"expected_yield": lambda self, *a: 1 / 0}, PluginError, r"expected_yield raised ZeroDivisionError"),
], ids=["verify None", "verify raises", "bool path", "tensor token", "yield str", "yield None", "yield tensor",
        "yield raises"])
def test_a_bad_verifier_output_is_one_line_naming_the_verifier(methods, error, match):
    with pytest.raises(error, match=match) as info:
        generate(verifying(**methods)(2))
    assert "\n" not in str(info.value) and "verifier 'rsd_hostile_plugins.Bad" in str(info.value)


# ---- before any model loads: what the config shows ----------------------------------------------------------------


@plugin
class NoShapes(SD):
    name = "no_shapes"

    @classmethod
    def shapes(cls, budget, params):
        return None


@plugin
class TextLength(SD):
    name = "text_length"

    @property
    def draft_length(self):
        return "4"


@plugin
class NoRule(SD):
    name = "no_rule"
    rule = None


@pytest.mark.parametrize(("overrides", "match"), [
    ([f"drafter._target_={MODULE}.NoShapes", "drafter.name=no_shapes"], r"shapes\(\) returned None .* a list of"),
    ([f"drafter._target_={MODULE}.TextLength", "drafter.name=text_length"], r"draft_length='4'; it must be an"),
    ([f"drafter._target_={MODULE}.NoRule", "drafter.name=no_rule"], r"its rule=None is not a node rule"),
    (["+drafter.verifier=42"], r"drafter.verifier=42 is not a verifier"),
], ids=["shapes None", "string draft_length", "rule None", "verifier 42"])
def test_a_plugin_the_config_can_judge_is_refused_before_models_load(overrides, match):
    with pytest.raises(ConfigError, match=match) as info:
        resolve_config(compose_cfg("model_pair=tiny_llama", *overrides))
    assert "\n" not in str(info.value)
