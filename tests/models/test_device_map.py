"""`model_pair.device_map` places a model through accelerate; the tree forward and cache compaction (CausalLM.compact)
must give the logits of the single-device model's plain forward of each node's sequence. On CPU: "cpu" for
everything, an explicit per-module map, and a split that offloads one decoder layer to disk (accelerate's hooks then
move weights and activations: the dispatch path a multi-GPU map takes)."""

import pytest
import torch

from helpers.trees import VOCAB, branching_tree, sequential_logits
from rsd.core.draft_context import tree_inputs
from rsd.harness.schema import ModelPairConfig
from rsd.models.adapter import CausalLM
from rsd.models.source import model_source
from rsd.models.source_contract import LOADED
from rsd.models.tiny import tiny_pair


def two_steps(lm: CausalLM) -> list[tuple[torch.Tensor, list[int]]]:
    """Tree forward, keep a 2-node accepted path (compaction), then the next step's tree forward: (logits of each
    tree node, the token sequence it conditions on)."""
    prompt = [5, 9, 2, 7, 11]
    tree = branching_tree(prompt[-1])
    lm.reset()
    first = lm.forward(*tree_inputs(tree, prompt, 0))[len(prompt) - 1:]
    leaf = max(range(len(tree)), key=lambda v: (tree.depths[v], v))
    path = tree.path_to(leaf)[:2]
    root = len(prompt) - 1
    lm.compact(root + 1, root + torch.tensor(path))
    committed = prompt + [tree.tokens[v] for v in path] + [33]
    nxt = branching_tree(committed[-1])
    second = lm.forward(*tree_inputs(nxt, committed, lm.cached_len))[len(committed) - lm.cached_len - 1:]
    return ([(first[v].cpu(), prompt + [tree.tokens[u] for u in tree.path_to(v)]) for v in range(len(tree))]
            + [(second[v].cpu(), committed + [nxt.tokens[u] for u in nxt.path_to(v)]) for v in range(len(nxt))])


PREFIX = {"llama": "model", "opt": "model.decoder"}


def module_map(arch: str, layer1: str) -> dict[str, str]:
    prefix = PREFIX[arch]
    tops = (["model.embed_tokens", "model.rotary_emb", "model.norm"] if arch == "llama" else
            ["model.decoder.embed_tokens", "model.decoder.embed_positions", "model.decoder.final_layer_norm"])
    return {**{m: "cpu" for m in tops}, f"{prefix}.layers.0": "cpu", f"{prefix}.layers.1": layer1, "lm_head": "cpu"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = {}
    for arch in ("llama", "opt"):
        target, _ = tiny_pair(arch, VOCAB, init_std=0.3)
        path = tmp_path_factory.mktemp(arch)
        target.save_pretrained(path)
        out[arch] = (target, path)
    return out


@pytest.mark.parametrize("arch", ["llama", "opt"])
@pytest.mark.parametrize("placement", ["cpu", "per-module", "disk-split"])
def test_device_map_matches_single_device(saved, arch, placement, tmp_path):
    target, path = saved[arch]
    device_map = {"cpu": "cpu", "per-module": module_map(arch, "cpu"), "disk-split": module_map(arch, "disk")}
    cfg = ModelPairConfig("p", str(path), dtype="float32", device="cpu", device_map=device_map[placement],
                          attn_implementation="sdpa", offload_folder=str(tmp_path / "offload"))
    model = model_source(str(path)).load(cfg)
    try:
        if placement == "disk-split":  # the layer really is dispatched by accelerate, not resident
            assert model.hf_device_map[f"{PREFIX[arch]}.layers.1"] == "disk"
            layer = model.get_submodule(f"{PREFIX[arch]}.layers.1")
            assert hasattr(layer, "_hf_hook") and next(layer.parameters()).device.type == "meta"
        lm = CausalLM(model)
        steps = two_steps(lm)
        assert len(lm.cache.layers) == 2 and lm.cached_len == 5 + 2 + 1 + len(branching_tree(0)) - 1
        for logits, ids in steps:  # equal to the single-device model's plain forward of each node's sequence
            torch.testing.assert_close(logits, sequential_logits(target, ids), atol=1e-5, rtol=0)
    finally:
        LOADED.clear()
