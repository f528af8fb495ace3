"""CausalLM's static-shape option (model_pair.static_forward): fixed KV buffers and padded queries give eager's
logits and greedy tokens; under torch.compile too (slow: each shape compiles)."""

import pytest
import torch

from helpers.config import compose_cfg
from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import AR, RSDS, SD, SpecTr
from rsd.errors import ConfigError
from rsd.harness.config import resolve_config
from rsd.models.adapter import PAD_QS, CausalLM
from rsd.models.tiny import tiny_pair

GREEDY = SamplingParams(0.0)
# the last prompt outgrows the first KV capacity while decoding
PROMPTS = [[1, 2, 3], [40, 41, 42, 43, 44, 45], list(range(2, 52)) * 5]
DRAFTERS = {"sd": lambda: SD(4), "spectr": lambda: SpecTr(3, 4), "rsd_s": lambda: RSDS(3, 4)}


def greedy_tokens(target: CausalLM, draft: CausalLM | None, drafter) -> list[list[int]]:
    engine = Engine(target, draft, drafter, GREEDY, [], 64)
    return [engine.generate(p, 30, prompt_generator(0, str(i))).new_token_ids for i, p in enumerate(PROMPTS)]


def check_greedy_identity(arch: str, static: str, names: list[str]) -> None:
    target, draft = tiny_pair(arch, 64, seed=5)
    want = greedy_tokens(CausalLM(target), None, AR())
    assert greedy_tokens(CausalLM(target, static), None, AR()) == want
    for name in names:
        assert greedy_tokens(CausalLM(target, static), CausalLM(draft, static), DRAFTERS[name]()) == want


@pytest.mark.parametrize("arch", ["llama", "opt"])
def test_static_buffers_greedy_identity(arch):
    check_greedy_identity(arch, "buffers", sorted(DRAFTERS))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "opt"])
def test_static_compile_greedy_identity(arch):
    check_greedy_identity(arch, "compile", ["sd", "spectr"])


@pytest.mark.parametrize("arch", ["llama", "opt"])
def test_static_tree_forward_and_compaction_match_eager(arch):
    """A tree of every padded size after a prompt, then a kept path: logits equal eager's within float rounding."""
    target, _ = tiny_pair(arch, 64, seed=5)
    gen = torch.Generator().manual_seed(0)
    for k in (*PAD_QS, 3, 13):
        lms = [CausalLM(target), CausalLM(target, "buffers")]
        out = []
        for lm in lms:
            lm.reset()
            lm.forward(torch.arange(20) + 2, torch.arange(20), None, last=1)
        parents = [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, k)]
        attend = torch.zeros(k, 20 + k, dtype=torch.bool)
        attend[:, :20] = True
        for i, p in enumerate(parents):
            attend[i, 20 + i] = True
            if p >= 0:
                attend[i, 20:] |= attend[p, 20:]
        depth = attend[:, 20:].sum(1) - 1
        tokens = torch.randint(2, 64, (k,), generator=gen)
        keep = torch.arange(20, 20 + k)[attend[-1, 20:]]
        for lm in lms:
            first = lm.forward(tokens, 20 + depth, attend)
            lm.compact(20, keep)
            nxt = lm.forward(torch.tensor([7]), torch.tensor([20 + len(keep)]), None)
            out.append((first, nxt, lm.cached_len))
        (e1, e2, elen), (s1, s2, slen) = out
        assert elen == slen == 21 + len(keep)
        assert torch.allclose(s1, e1, atol=1e-5) and torch.allclose(s2, e2, atol=1e-5)


def test_bad_static_mode_is_refused():
    target, _ = tiny_pair("llama", 64)
    with pytest.raises(ValueError, match="static='jit'"):
        CausalLM(target, "jit")


def test_bad_static_forward_setting_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="model_pair.static_forward='jit'") as err:
        resolve_config(compose_cfg("model_pair=tiny_llama", "+model_pair.static_forward=jit"))
    assert "\n" not in str(err.value)


def test_eager_default_keeps_the_run_identity():
    """The key's default (null) leaves a run's identity as it was before the key existed; a mode changes it."""
    plain = resolve_config(compose_cfg("model_pair=smollm2"))
    compiled = resolve_config(compose_cfg("model_pair=smollm2", "model_pair.static_forward=compile"))
    shape = {"length": 4}
    assert "static_forward" not in plain.identity(shape, True)["model_pair"]
    assert compiled.identity(shape, True)["model_pair"]["static_forward"] == "compile"
