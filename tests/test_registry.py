"""rsd.registry: one lookup for every extension point (names, users' dotted paths, the base check, did-you-mean),
and every config key that names one goes through it."""

import os
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from helpers.config import ROOT, compose_cfg
from rsd.core.rules import get_rule, sd_rule
from rsd.drafters.base import Drafter
from rsd.errors import ConfigError
from rsd.harness.config import resolve_config
from rsd.harness.logger import NullLogger, make_logger
from rsd.harness.schema import LoggerConfig
from rsd.models.embedded import SHIPPED_DRAFTS
from rsd.paths import CONF_DIR
from rsd.registry import DATASETS, DRAFTERS, EMBEDDED_MODELS, LOGGERS, RULES, TINY_MODELS, VERIFIERS, Registry, lookup
from rsd.verify.walk import Walk

ALL = (DRAFTERS, VERIFIERS, RULES, LOGGERS, DATASETS, TINY_MODELS, EMBEDDED_MODELS)
# (registry, a typo of one of its names, the name it should suggest)
TYPOS = [(DRAFTERS, "rsd-c", "rsd_c"), (VERIFIERS, "wlak", "walk"), (RULES, "kseqq", "kseq"),
         (LOGGERS, "wandbb", "wandb"), (DATASETS, "dolly_bultin", "dolly_builtin"),
         (TINY_MODELS, "tiny:lama", "tiny:llama"),
         (EMBEDDED_MODELS, "embedded:smollm2-drafts", "embedded:smollm2-draft")]


class MyWalk(Walk):
    """A user's verifier class: instantiated by the lookup."""


class ListLogger:
    """A user's logger: constructed with (logger config, run plan)."""

    def __init__(self, cfg, plan):
        self.cfg, self.lines = cfg, []

    def log_prompt(self, index, record):
        self.lines.append(index)

    def log_summary(self, summary):
        self.lines.append("summary")

    def close(self):
        return None


@pytest.mark.parametrize("registry", ALL, ids=[r.kind for r in ALL])
def test_every_registered_name_resolves_to_an_object_of_its_kind(registry):
    assert list(registry)
    for name in registry:
        assert lookup(registry, name) is not None


@pytest.mark.parametrize("registry,typo,suggestion", TYPOS, ids=[r.kind for r, _, _ in TYPOS])
def test_an_unknown_name_is_one_line_naming_the_key_the_known_names_and_the_closest(registry, typo, suggestion):
    with pytest.raises(ConfigError) as err:
        lookup(registry, typo)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{registry.key}={typo!r}")
    assert f"did you mean {suggestion!r}?" in message
    assert all(name in message for name in registry)
    assert ("dotted path" in message) == registry.open


@pytest.mark.parametrize("override,key,suggestion", [
    ("drafter._target_=rsd.drafters.SDD", "drafter._target_", "rsd.drafters.SD"),
    ("+drafter.verifier=wlak", "drafter.verifier", "walk"),
    ("logger.name=wandbb", "logger.name", "wandb"),
    ("dataset.name=dolly_bultin", "dataset.name", "dolly_builtin"),
    ("model_pair.draft=embedded:smollm2-drafts", "model_pair.draft", "embedded:smollm2-draft"),
    ("model_pair.target=tiny:lama", "model_pair.target", "tiny:llama"),
])
def test_every_config_key_that_names_an_extension_point_goes_through_the_registry(override, key, suggestion):
    with pytest.raises(ConfigError) as err:
        resolve_config(compose_cfg(override))
    assert str(err.value).startswith(f"{key}=") and f"did you mean {suggestion!r}?" in str(err.value)


def test_a_users_dotted_path_is_imported_for_every_open_kind(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "topk_tree"))
    drafter = lookup(DRAFTERS, "topk_tree.TopKTree")
    assert isinstance(drafter, type) and issubclass(drafter, Drafter) and drafter.__name__ == "TopKTree"
    assert isinstance(lookup(VERIFIERS, f"{__name__}.MyWalk"), MyWalk)
    assert lookup(RULES, "rsd.core.rules.sd_rule") is sd_rule
    q = torch.tensor([0.5, 0.5])
    assert get_rule(f"{__name__}.rule_of_mine")(q, q, torch.tensor([1])) == "mine"
    logger = make_logger(LoggerConfig(f"{__name__}.ListLogger", project="x"), plan=None)
    logger.log_prompt(0, {})
    assert isinstance(logger, ListLogger) and logger.lines == [0] and logger.cfg.project == "x"
    assert isinstance(make_logger(LoggerConfig(), plan=None), NullLogger)


def rule_of_mine(q, p, candidates):
    return "mine"


@pytest.mark.parametrize("registry,path,words", [
    (DRAFTERS, "collections.OrderedDict", "is not a Drafter: name a subclass of rsd.drafters.base.Drafter"),
    (DRAFTERS, "rsd.verify.walk.Walk", "is not a Drafter"),
    (VERIFIERS, "builtins.print", "is not a Verifier (it has no name, verify, expected_yield)"),
    (VERIFIERS, f"{__name__}.ListLogger", "is not a Verifier (it has no name, verify, expected_yield)"),
    (LOGGERS, f"{__name__}.MyWalk", "is not a Logger (it has no log_prompt, log_summary, close)"),
    (RULES, "math.pi", "is not a node rule: it is not callable"),
])
def test_an_object_of_the_wrong_kind_is_refused(registry, path, words):
    with pytest.raises(ConfigError) as err:
        lookup(registry, path)
    assert str(err.value).startswith(f"{registry.key}={path!r} {words}") and "\n" not in str(err.value)


class NeedsArguments(Walk):
    def __init__(self, depth):
        super().__init__()


def test_a_name_that_is_not_a_string_or_a_class_that_cannot_be_built_is_one_line():
    with pytest.raises(ConfigError, match=r"^logger.name=\['wandb'\] is not a logger \(did you mean 'wandb'\?\)"):
        lookup(LOGGERS, ["wandb"])
    with pytest.raises(ConfigError, match=r"could not be constructed without arguments: TypeError: .*depth"):
        lookup(VERIFIERS, f"{__name__}.NeedsArguments")


def test_a_closed_kind_refuses_dotted_paths():
    for registry in (DATASETS, TINY_MODELS, EMBEDDED_MODELS):
        assert not registry.open
        with pytest.raises(ConfigError, match=f"is not an? {registry.kind};"):
            lookup(registry, "rsd.data.DOLLY")


def test_a_users_module_that_fails_to_import_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('needs a GPU\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as err:
        lookup(DRAFTERS, "broken_plugin.Mine")
    assert str(err.value).startswith("drafter._target_='broken_plugin.Mine' cannot be imported (needs a GPU second")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"cannot be imported \(.*\) \(did you mean 'rsd.drafters.SD'\?\)"):
        lookup(DRAFTERS, "rsd.drafters.SDD")


def test_the_registries_agree_with_the_config_groups():
    """conf/drafter/NAME.yaml's `_target_` is what NAME stands for; every built-in dataset YAML and shipped draft is
    registered."""
    for path in sorted((CONF_DIR / "drafter").glob("*.yaml")):
        assert DRAFTERS.path(path.stem) == OmegaConf.load(path)["_target_"]
    assert sorted(DRAFTERS) == sorted(p.stem for p in (CONF_DIR / "drafter").glob("*.yaml"))
    builtin = [OmegaConf.load(p) for p in (CONF_DIR / "dataset").glob("*.yaml")]
    assert sorted(DATASETS) == sorted(d["name"] for d in builtin if d.get("source") == "builtin")
    assert {f"embedded:{name}" for name in SHIPPED_DRAFTS} < set(EMBEDDED_MODELS)


def test_a_drafter_named_by_registry_name_is_the_same_run_as_by_its_path():
    by_name = resolve_config(compose_cfg("drafter._target_=sd"))
    by_path = resolve_config(compose_cfg("drafter._target_=rsd.drafters.SD"))
    shape = by_path.drafter.shapes[0]
    assert by_name.drafter.target == by_path.drafter.target == DRAFTERS.path("sd")
    assert by_name.identity(shape, uses_draft=True) == by_path.identity(shape, uses_draft=True)


def test_a_registry_is_data():
    mine = Registry("widget", "widget.name", {"a": "rsd.core.rules.sd_rule"})
    assert "a" in mine and list(mine) == ["a"] and mine.path("a") == "rsd.core.rules.sd_rule" and mine.path("b") == "b"


def test_importing_the_registry_imports_nothing_heavy():
    code = "import sys, rsd.registry; print(sorted(m for m in sys.modules if m.split('.')[0] in " \
           "('rsd', 'torch', 'transformers', 'numpy', 'omegaconf', 'hydra')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['rsd', 'rsd.errors', 'rsd.registry']"
