"""Whole-engine properties: greedy identity for every drafter, the one-step expected block efficiency computed from
the node laws, and the counters."""

import pytest
import torch

from rsd.certify.outcomes import expected_accepted
from rsd.core.engine import Engine
from rsd.core.generation import Generation
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import AR, RSDC, RSDS, SD, Eagle2, SpecInfer, SpecTr
from rsd.models.adapter import CausalLM
from rsd.models.tiny import tiny_pair

DRAFTERS = {
    "sd": lambda: SD(4),
    "specinfer": lambda: SpecInfer(3, 4),
    "spectr": lambda: SpecTr(3, 4),
    "rsd_c": lambda: RSDC([3, 1, 1, 1]),
    "rsd_s": lambda: RSDS(3, 4),
    "eagle2": lambda: Eagle2(3, 4, 8),
}


@pytest.mark.parametrize("arch", ["llama", "opt"])
@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_greedy_identity_tiny(arch, name):
    target, draft = tiny_pair(arch, 64, seed=5)
    greedy = SamplingParams(0.0)
    ar = Engine(CausalLM(target), None, AR(), greedy, [], 64)
    for draft_model in (draft, target):  # an unrelated draft (mostly rejected) and a perfect one (all accepted)
        engine = Engine(CausalLM(target), CausalLM(draft_model), DRAFTERS[name](), greedy, [], 64)
        for i, prompt in enumerate([[1, 2, 3], [40, 41, 42, 43, 44, 45]]):
            want = ar.generate(prompt, 30, prompt_generator(0, str(i))).new_token_ids
            assert engine.generate(prompt, 30, prompt_generator(0, str(i))).new_token_ids == want


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_one_step_expected_block_efficiency(name):
    """E[tokens per step] = 1 + sum over nodes of P(reach and accept), exactly from the node laws, equals the mean
    of the walks (z-test at 4 standard errors) — and at temperature 1 steps do accept something."""
    target, draft = tiny_pair("llama", 16, seed=2, init_std=0.15)
    engine = Engine(CausalLM(target), CausalLM(draft), DRAFTERS[name](), SamplingParams(1.0), [], 16)
    exact, measured = [], []
    for i in range(400):
        engine.reset()
        step = engine.step([3, 4, 5], prompt_generator(1, str(i)), Generation())
        exact.append(1.0 + expected_accepted(step.tree, step.q, engine.drafter.rule))
        measured.append(float(len(step.emitted)))
    exact_t, measured_t = torch.tensor(exact), torch.tensor(measured)
    stderr = (measured_t - exact_t).std() / len(exact) ** 0.5
    assert abs(float((measured_t - exact_t).mean())) < 4 * float(stderr)
    assert 1.2 < float(exact_t.mean()) < 5.0


def test_sd_expected_block_efficiency_closed_form():
    """For an SD chain whose draft equals the target, every token is accepted: E = L + 1 exactly."""
    target, _ = tiny_pair("llama", 16, seed=2, init_std=0.15)
    engine = Engine(CausalLM(target), CausalLM(target), SD(3), SamplingParams(1.0), [], 16)
    engine.reset()
    step = engine.step([3, 4, 5], prompt_generator(0, "x"), Generation())
    assert abs(1 + expected_accepted(step.tree, step.q, "sd") - 4.0) < 1e-5
    assert len(step.emitted) == 4


def test_counters_and_eos():
    target, draft = tiny_pair("llama", 64, seed=1)
    engine = Engine(CausalLM(target), CausalLM(target), SD(4), SamplingParams(1.0), [], 64)
    out = engine.generate([1, 2, 3], 17, prompt_generator(0, "c"))
    assert len(out.new_token_ids) == 17
    # 5 + 5 + 5 + 2 tokens: three steps of four drafts, then a last step that drafts only the one token it can emit
    assert out.target_calls == 4 and out.draft_calls == 13
    assert out.tokens_verified == [4, 4, 4, 1]
    assert out.accepted_lengths == [4, 4, 4, 1]
    assert out.wall_s >= out.time_draft_s + out.time_target_s > 0
    assert out.first_step_tokens == 5 and out.decode_tokens == 12
    assert 0 < out.ttft_s < out.wall_s and abs(out.ttft_s + out.decode_s - out.wall_s) < 1e-12
    eos = out.new_token_ids[6]
    stopped = Engine(CausalLM(target), CausalLM(target), SD(4), SamplingParams(1.0), [eos], 64).generate(
        [1, 2, 3], 17, prompt_generator(0, "c"))
    first = out.new_token_ids.index(eos)
    assert stopped.new_token_ids == out.new_token_ids[: first + 1]


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_last_step_never_drafts_past_the_end(name):
    """With a perfect draft every drafted level is accepted, so a step's emitted count is its depth + 1: the steps'
    counts must add up to max_new_tokens exactly, i.e. no step drafted tokens that max_new_tokens then cut off."""
    target, _ = tiny_pair("llama", 64, seed=1)
    engine = Engine(CausalLM(target), CausalLM(target), DRAFTERS[name](), SamplingParams(1.0), [], 64)
    for max_new in (1, 2, 7):
        out = engine.generate([1, 2, 3], max_new, prompt_generator(0, name))
        assert len(out.new_token_ids) == max_new
        assert sum(a + 1 for a in out.accepted_lengths) == max_new
        assert max(out.tokens_verified) <= max(engine.drafter.max_tree_size, 0)


def test_warm_up_leaves_no_trace():
    """The untimed warm-up uses its own generator: the prompt's output and randomness are unchanged by it."""
    target, draft = tiny_pair("llama", 64, seed=1)
    engine = Engine(CausalLM(target), CausalLM(draft), SpecInfer(2, 3), SamplingParams(1.0), [], 64)
    cold_gen = prompt_generator(0, "w")
    cold = engine.generate([1, 2, 3], 20, cold_gen).new_token_ids
    engine.warm_up([4, 5, 6])
    warm_gen = prompt_generator(0, "w")
    assert engine.generate([1, 2, 3], 20, warm_gen).new_token_ids == cold
    assert torch.equal(cold_gen.get_state(), warm_gen.get_state())


def test_ar_uses_no_draft_model():
    target, _ = tiny_pair("opt", 64)
    out = Engine(CausalLM(target), None, AR(), SamplingParams(1.0), [], 64).generate([5], 9, prompt_generator(0, "a"))
    assert out.target_calls == 9 and out.draft_calls == 0 and out.accepted_lengths == [0] * 9


def test_tiny_weights_do_not_depend_on_the_default_dtype():
    """A run's tokens must not depend on global torch state a caller (or another test) left behind."""
    reference = tiny_pair("llama", 64, seed=5)[0]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        other = tiny_pair("llama", 64, seed=5)[0]
    finally:
        torch.set_default_dtype(previous)
    assert all(torch.equal(a, b) for a, b in zip(reference.parameters(), other.parameters()))


def test_a_nan_law_stops_the_decode_with_a_clear_error():
    """A draft whose logits are NaN would still get tokens from Gumbel-top-k; the engine refuses the step instead."""
    target, draft = tiny_pair("llama", 32, seed=1)
    broken = CausalLM(draft)
    forward = broken.forward
    broken.forward = lambda *args, **kwargs: forward(*args, **kwargs) * float("nan")
    engine = Engine(CausalLM(target), broken, RSDC([2, 1]), SamplingParams(1.0), [], 32)
    with pytest.raises(ValueError, match="NaN"):
        engine.generate([3, 4, 5], 8, prompt_generator(0, "p"))
