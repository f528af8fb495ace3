"""The trimmed-head draft: loads through the Auto classes, gives zero mass outside its head, stays lossless."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from rsd.core.engine import Engine
from rsd.core.generation import Generation
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import AR, RSDS, SD, SpecTr
from rsd.models.adapter import CausalLM
from rsd.models.dial import MixtureLM
from rsd.models.tiny import tiny_pair
from rsd.models.trimmed import TrimmedLlamaConfig, TrimmedLlamaForCausalLM, output_width

HEAD = [1, 2, 3, 5, 8, 13, 21, 34, 40, 41, 42, 43, 44, 45, 50, 60]  # 16 of a 64-token vocabulary, EOS (1) included


def trimmed_draft(seed: int = 3) -> TrimmedLlamaForCausalLM:
    torch.manual_seed(seed)
    config = TrimmedLlamaConfig(head_token_ids=HEAD, full_vocab_size=64, vocab_size=len(HEAD) + 1, hidden_size=32,
                                intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                num_key_value_heads=1, max_position_embeddings=2048, tie_word_embeddings=True,
                                initializer_range=0.3)
    return TrimmedLlamaForCausalLM(config).eval()


def test_saves_loads_and_scatters_into_the_full_vocabulary(tmp_path):
    model = trimmed_draft()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.tensor([[2, 7, 40, 63]])  # 7 and 63 are outside the head: they share the last embedding row
    logits = loaded(input_ids=ids).logits[0]
    assert isinstance(loaded, TrimmedLlamaForCausalLM) and output_width(loaded) == 64 and logits.shape == (4, 64)
    assert torch.equal(torch.isfinite(logits[-1]).nonzero().flatten(), torch.tensor(HEAD))
    torch.testing.assert_close(logits, model(input_ids=ids).logits[0])
    inner = model.lm_head(model.model(input_ids=torch.tensor([[1, 16, 8, 16]])).last_hidden_state)[0, :, :-1]
    torch.testing.assert_close(logits[:, HEAD], inner)  # 2 -> row 1, 40 -> row 8; unknown inputs share row 16


def test_a_config_whose_head_does_not_fit_is_refused():
    with pytest.raises(ValueError, match="head_token_ids"):
        TrimmedLlamaForCausalLM(TrimmedLlamaConfig(head_token_ids=HEAD, full_vocab_size=64, vocab_size=5,
                                                   hidden_size=32, num_attention_heads=2))


@pytest.mark.parametrize("make", [lambda: SD(3), lambda: SpecTr(2, 3), lambda: RSDS(2, 3)])
def test_greedy_identity_with_a_trimmed_draft(make):
    target, _ = tiny_pair("llama", 64, seed=5)
    greedy = SamplingParams(0.0)
    ar = Engine(CausalLM(target), None, AR(), greedy, [], 64)
    engine = Engine(CausalLM(target), CausalLM(trimmed_draft()), make(), greedy, [], 64)
    for i, prompt in enumerate([[1, 2, 3], [40, 41, 42, 7, 63]]):
        want = ar.generate(prompt, 24, prompt_generator(0, str(i))).new_token_ids
        assert engine.generate(prompt, 24, prompt_generator(0, str(i))).new_token_ids == want


def test_drafted_tokens_stay_inside_the_head():
    target, _ = tiny_pair("llama", 64, seed=5)
    engine = Engine(CausalLM(target), CausalLM(trimmed_draft()), SpecTr(3, 3), SamplingParams(1.0), [], 64)
    engine.reset()
    step = engine.step([40, 41, 42], prompt_generator(1, "y"), Generation())
    assert len(step.tree) > 1 and set(step.tree.tokens[1:]) <= set(HEAD)


@pytest.mark.parametrize("mix", [0.3, 0.7])
def test_the_dial_mixes_a_trimmed_draft_inside_its_head(mix):
    """The geometric mixture keeps the draft's zero-mass tokens at zero (no NaN from -inf for a < 0.5)."""
    target, _ = tiny_pair("llama", 64, seed=5)
    dial = MixtureLM(CausalLM(trimmed_draft()), CausalLM(target), mix)
    engine = Engine(CausalLM(target), dial, RSDS(3, 3), SamplingParams(1.0), [], 64)
    engine.reset()
    step = engine.step([40, 41, 42], prompt_generator(1, "y"), Generation())
    assert len(step.tree) > 1 and set(step.tree.tokens[1:]) <= set(HEAD)
    law = step.tree.draft_probs[0]
    assert torch.isfinite(law).all() and law[HEAD].sum() > 0.999
