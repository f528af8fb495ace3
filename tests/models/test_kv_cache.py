"""rsd's own KV cache (rsd.models.kv_cache): no transformers class under it, buffers that grow and compact in place,
the mask sizes transformers asks of a cache, and plain causal forwards through it equal a forward without a cache
(on a sliding-window model too, whose window comes from the mask over the whole cache)."""

import pytest
import torch
from transformers import LlamaConfig, MistralConfig, MistralForCausalLM, Qwen2Config

from rsd.models.adapter import CausalLM, full_attention_only
from rsd.models.kv_cache import BufferLayer, KVCache
from rsd.models.tiny import tiny_pair


def entries(n: int, start: int = 0) -> torch.Tensor:
    """[1, 2 heads, n, 3]: entry i holds the value start + i everywhere."""
    return torch.arange(start, start + n, dtype=torch.float32)[None, None, :, None].expand(1, 2, n, 3).clone()


def test_buffer_layer_appends_grows_and_compacts_in_place():
    layer = BufferLayer()
    layer.update(entries(200), entries(200))
    keys, _ = layer.update(entries(100, 200), entries(100, 200))  # past the first 256-entry buffer
    assert layer.get_seq_length() == 300 and torch.equal(keys, entries(300))
    layer.compact(250, torch.tensor([252, 260, 299]))
    want = torch.cat([entries(250), entries(1, 252), entries(1, 260), entries(1, 299)], 2)
    assert layer.get_seq_length() == 253 and torch.equal(layer.keys, want) and torch.equal(layer.values, want)


def test_mask_sizes_count_the_cached_entries_and_the_new_ones():
    cache = KVCache(2, BufferLayer)
    assert cache.get_seq_length() == 0 and cache.is_sliding == [False, False]
    for layer_idx in (0, 1):
        cache.update(entries(5), entries(5), layer_idx)
    assert cache.get_query_offset() == 5
    assert cache.get_mask_sizes(3, 1) == (8, 0) == cache.get_mask_sizes(torch.arange(5, 8), 0)


def test_the_cache_owns_its_classes():
    """No transformers class under the cache or its layers (a private one pinned the transformers version)."""
    target, _ = tiny_pair("llama")
    for static in ("off", "buffers"):
        lm = CausalLM(target, static)
        lm.forward(torch.tensor([5, 9, 2]), torch.arange(3), None)
        for obj in (lm.cache, *lm.cache.layers):
            assert not [c for c in type(obj).__mro__ if c.__module__.startswith("transformers")]


@pytest.mark.parametrize("arch", ["llama", "opt"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_forwards_through_the_cache_equal_one_forward_without(arch, dtype):
    target = tiny_pair(arch)[0].to(dtype)
    ids = [5, 9, 2, 7, 11, 3, 8]
    lm = CausalLM(target)
    got = torch.cat([lm.forward(torch.tensor(ids[:4]), torch.arange(4), None),
                     lm.forward(torch.tensor(ids[4:]), torch.arange(4, 7), None)])
    with torch.inference_mode():
        want = target(input_ids=torch.tensor([ids])).logits[0]
    tol = 1e-5 if dtype == torch.float32 else 0.05
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=0)


def test_sliding_window_layers_attend_within_their_window():
    config = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, sliding_window=3)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = MistralForCausalLM(config).eval()
    ids = [5, 9, 2, 7, 11, 3, 8, 1]
    lm = CausalLM(model)
    got = torch.cat([lm.forward(torch.tensor(ids[:5]), torch.arange(5), None),
                     lm.forward(torch.tensor(ids[5:6]), torch.tensor([5]), None),
                     lm.forward(torch.tensor(ids[6:]), torch.arange(6, 8), None)])
    with torch.inference_mode():
        want = model(input_ids=torch.tensor([ids])).logits[0]
        unwindowed = MistralForCausalLM(MistralConfig(**{**config.to_dict(), "sliding_window": None}))
        unwindowed.load_state_dict(model.state_dict())
        full = unwindowed.eval()(input_ids=torch.tensor([ids])).logits[0]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert not torch.allclose(got[-1], full[-1], atol=1e-3)  # the window matters at the last position
    with pytest.raises(ValueError, match="full-attention layers only"):
        CausalLM(model, "buffers").reset()


def test_full_attention_only_reads_the_config():
    assert full_attention_only(LlamaConfig())
    assert full_attention_only(Qwen2Config(use_sliding_window=False, sliding_window=4096))
    assert not full_attention_only(MistralConfig(sliding_window=4096))
