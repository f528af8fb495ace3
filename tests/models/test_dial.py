"""The acceptance dial: a = 0 is the draft, a = 1 the target (everything accepted), any a is lossless (greedy)."""

import pytest
import torch

from rsd.certify.outcomes import expected_accepted
from rsd.core.engine import Engine
from rsd.core.generation import Generation
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import AR, SD
from rsd.models.adapter import CausalLM
from rsd.models.dial import MixtureLM, mix_logits
from rsd.models.tiny import tiny_pair


def dial_engine(mix: float, params: SamplingParams, length: int = 3) -> Engine:
    target, draft = tiny_pair("llama", 16, seed=2, init_std=0.15)
    return Engine(CausalLM(target), MixtureLM(CausalLM(draft), CausalLM(target), mix), SD(length), params, [], 16)


def mean_expected_tokens(engine: Engine, steps: int = 40) -> float:
    total = 0.0
    for i in range(steps):
        engine.reset()
        step = engine.step([3, 4, 5], prompt_generator(0, str(i)), Generation())
        total += 1.0 + expected_accepted(step.tree, step.q, engine.drafter.rule)
    return total / steps


def test_the_dial_ends_are_the_draft_and_the_target():
    target, draft = tiny_pair("llama", 16, seed=2, init_std=0.15)
    plain = Engine(CausalLM(target), CausalLM(draft), SD(3), SamplingParams(1.0), [], 16)
    at_zero = dial_engine(0.0, SamplingParams(1.0))
    for i in range(5):
        want = plain.generate([3, 4, 5], 12, prompt_generator(0, str(i)))
        assert at_zero.generate([3, 4, 5], 12, prompt_generator(0, str(i))).new_token_ids == want.new_token_ids
    assert abs(mean_expected_tokens(dial_engine(1.0, SamplingParams(1.0))) - 4.0) < 1e-5  # L + 1: all accepted


def test_acceptance_rises_with_the_dial():
    values = [mean_expected_tokens(dial_engine(a, SamplingParams(1.0))) for a in (0.0, 0.5, 0.9)]
    assert values[0] < values[1] < values[2] < 4.0


@pytest.mark.parametrize("mix", [0.3, 0.8])
def test_dial_greedy_identity(mix):
    target, _ = tiny_pair("llama", 16, seed=2, init_std=0.15)
    greedy = SamplingParams(0.0)
    ar = Engine(CausalLM(target), None, AR(), greedy, [], 16)
    engine = dial_engine(mix, greedy)
    for i, prompt in enumerate([[1, 2, 3], [9, 4, 9, 4]]):
        want = ar.generate(prompt, 20, prompt_generator(0, str(i))).new_token_ids
        assert engine.generate(prompt, 20, prompt_generator(0, str(i))).new_token_ids == want


def test_mix_out_of_range_is_refused():
    target, draft = tiny_pair("llama", 16, seed=2)
    with pytest.raises(ValueError, match="mix"):
        MixtureLM(CausalLM(draft), CausalLM(target), 1.5)


@pytest.mark.parametrize("mix", [0.1, 0.3, 0.5, 0.9])
def test_mixed_logits_are_minus_inf_exactly_where_either_law_has_no_mass(mix):
    inf = float("inf")
    draft = torch.tensor([[0.5, -inf, 2.0, -inf]])
    target = torch.tensor([[1.0, 3.0, -inf, -inf]])
    want = torch.tensor([[(1 - mix) * 0.5 + mix * 1.0, -inf, -inf, -inf]])
    torch.testing.assert_close(mix_logits(draft, target, mix), want)
