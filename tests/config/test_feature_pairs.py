"""A model pair's draft kind: a feature head is declared in YAML and checked against its target before any model
loads."""

import json

import pytest
from omegaconf import OmegaConf

from helpers.config import compose_cfg
from rsd.errors import ConfigError
from rsd.harness.validate import validate_config
from rsd.models.embedded import ASSETS_DIR as ASSETS


def pair_conf(*overrides: str) -> dict:
    return OmegaConf.to_container(compose_cfg(*overrides), resolve=True)


def test_the_feature_pairs_compose_and_validate():
    validate_config(pair_conf("model_pair=tiny_llama_eagle"))
    validate_config(pair_conf("model_pair=smollm2_eagle"))


@pytest.mark.parametrize("override, words", [
    ("model_pair.draft_kind=mystery", "is not a draft kind"),
    ("+model_pair.mix=0.5", "not supported with draft_kind=feature_head"),
    ("model_pair.draft=embedded:smollm2-draft-v3", "holds no feature_head.json"),
])
def test_a_feature_pair_that_cannot_work_is_one_line(override, words):
    with pytest.raises(ConfigError, match=words):
        validate_config(pair_conf("model_pair=smollm2_eagle", override))


def test_a_head_for_another_target_is_refused(tmp_path):
    """The head's width is read from feature_head.json and the target's from its config.json (no weights load)."""
    head = json.loads((ASSETS / "smollm2-eagle" / "feature_head.json").read_text())
    head["hidden_size"] = 64
    (tmp_path / "head").mkdir()
    (tmp_path / "head" / "feature_head.json").write_text(json.dumps(head))
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 576, "vocab_size": 49152,
                                                    "num_hidden_layers": 30}))
    conf = pair_conf("model_pair=smollm2_eagle", f"model_pair.draft={tmp_path / 'head'}",
                     f"model_pair.target={target}")
    with pytest.raises(ConfigError, match="does not fit the target"):
        validate_config(conf)
