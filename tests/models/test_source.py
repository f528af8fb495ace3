"""One ModelSource per spec: the kind a spec string reads as, the sources a model pair names, and a feature head as
one more source over the files of its spec (nothing here loads weights)."""

from dataclasses import replace

import pytest

from rsd.errors import ConfigError
from rsd.harness.schema import ModelPairConfig, Tiny
from rsd.models.builtin_sources import EmbeddedTarget, ShippedDraft, TinyHeadSource, TinySource, UnknownEmbedded
from rsd.models.head_source import FeatureHeadSource
from rsd.models.source import draft_source, model_source, pair_sources
from rsd.models.user_sources import HubSource, LocalSource


@pytest.mark.parametrize(("spec", "kind"), [
    ("tiny:llama", TinySource), ("embedded:smollm2-draft-v3", ShippedDraft), ("embedded:smollm2-eagle", ShippedDraft),
    ("embedded:smollm2-135m-instruct", EmbeddedTarget), ("embedded:nope", UnknownEmbedded),
    ("./models/x", LocalSource), (".hidden", LocalSource), ("~/models/x", LocalSource), ("a/b/c", LocalSource),
    ("facebook/opt-125m", HubSource), ("gpt2", HubSource)])
def test_a_spec_reads_as_one_kind(spec, kind):
    assert type(model_source(spec)) is kind


def test_an_existing_relative_directory_is_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt2").mkdir()
    assert type(model_source("gpt2")) is LocalSource


def test_a_pair_names_its_sources():
    tiny = ModelPairConfig("p", "tiny:llama", tiny=Tiny(vocab_size=300))
    sources = pair_sources(tiny)
    assert sources.target == sources.tokenizer == TinySource("tiny:llama", Tiny(vocab_size=300))
    assert sources.draft == TinySource("tiny:llama", Tiny(vocab_size=300), draft=True)
    assert type(pair_sources(replace(tiny, draft_kind="feature_head")).draft) is TinyHeadSource
    eagle = pair_sources(ModelPairConfig("p", "embedded:smollm2-135m-instruct", "embedded:smollm2-eagle",
                                         "feature_head", tokenizer="org/tok"))
    assert eagle.draft == FeatureHeadSource("embedded:smollm2-eagle", ShippedDraft("embedded:smollm2-eagle"))
    assert eagle.tokenizer == HubSource("org/tok")
    assert pair_sources(ModelPairConfig("p", "org/model")).draft is None


def test_a_tiny_source_builds_its_half_of_the_pair():
    target, draft = TinySource("tiny:llama", Tiny(vocab_size=300)), TinySource("tiny:llama", Tiny(vocab_size=300), True)
    assert target.config().hidden_size == 64 and draft.config().hidden_size == 32 and draft.config().vocab_size == 300
    assert target.status() == (True, "built from a config (no files)") and target.context_length() == 2048


def test_a_local_feature_head_is_loadable_and_has_no_config_of_its_own(tmp_path):
    (tmp_path / "feature_head.json").write_text("{}")
    head = draft_source(model_source("org/model"), str(tmp_path), "feature_head")
    assert head.status() == (True, f"feature head in {tmp_path}") and not head.missing()
    assert head.config() is None and head.context_length() is None and not head.own_vocabulary
    assert head.fingerprint() == model_source(str(tmp_path)).fingerprint()
    assert draft_source(model_source("org/model"), str(tmp_path / "none"), "feature_head").missing()


def test_check_refuses_what_can_never_load(tmp_path):
    with pytest.raises(ConfigError, match=r"model_pair.draft='embedded:nope' is not an embedded model"):
        model_source("embedded:nope").check("draft")
    with pytest.raises(ConfigError, match="is a local path that does not exist"):
        model_source(str(tmp_path / "none")).check("target")
    assert not model_source("embedded:nope").status()[0]
    for ok in ("tiny:llama", "embedded:smollm2-draft", str(tmp_path), "org/model"):
        model_source(ok).check("target")
