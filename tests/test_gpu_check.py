"""benchmarks/gpu_check.sh must not rot: its CPU smoke run (the GPU run's code, scaled down) covers every method and
budget and writes its report; the sync counter counts what a GPU would wait for; an incompatible transformers is
refused in one line."""

import importlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"


def bench_module(name: str):
    """A benchmarks/ module, imported as the scripts import each other (benchmarks/ on sys.path)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def shapes_module():
    return bench_module("gpu_paper_shapes")


@pytest.fixture(scope="module")
def measure_module():
    return bench_module("paper_shapes_measure")


@pytest.mark.slow  # ~13 s; tests/test_benchmarks.py runs the same benchmark scaled down in the default tier
def test_cpu_smoke_writes_every_method_and_budget(tmp_path, shapes_module):
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(["bash", str(BENCH / "gpu_check.sh"), "--cpu-smoke", str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert (tmp_path / "gpu_check.txt").read_text() == run.stdout
    assert [p["pair"] for p in report["pairs"]] == list(shapes_module.PAIRS)
    for pair in report["pairs"]:
        assert [r["method"] for r in pair["rows"]] == list(shapes_module.CHECK_SHAPES) and not pair["skipped"]
        assert list(pair["target_forward_ms"]) == ["1", "2", "4", "8", "16", "32"]
        for row in pair["rows"]:
            assert row["rate"] > 0 and row["target_ms"] > 0
            if row["method"] in ("ar", "sd L=4", "rsd_s 3x4"):  # the smoke run's --static-shapes
                assert row["static"] == f"{row['static_rate'] / row['rate']:.2f}x" and row["static_warm_up_s"] > 0
            else:
                assert row["static"] == "-"
            assert row["B"] == shapes_module.ALL_SHAPES[row["method"]]().max_tree_size
            assert (row["draft_ms"] > 0) == (row["method"] != "ar")
            assert row["syncs_engine"] >= 1  # verification reads at least the accepted path back
    assert report["static_path"] == "buffers" and not pair["static_skipped"]
    assert "SCALED DOWN" in run.stdout and "static-shape forwards vs eager" in run.stdout


def test_gpu_check_needs_an_output_folder():
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    run = subprocess.run(["bash", str(BENCH / "gpu_check.sh")], env=env, capture_output=True, text=True)
    assert run.returncode == 2 and "no output folder" in run.stderr and len(run.stderr.splitlines()) == 1


def test_full_size_without_cuda_is_refused_in_one_line(shapes_module, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="no CUDA device here.*--cpu-smoke"):
        shapes_module.main([])


def test_sync_counter_counts_host_reads_of_the_device_only(measure_module):
    x = torch.arange(5)
    with measure_module.SyncCounter(torch.device("cpu")) as counter:
        counter.active = True
        x.tolist(), x[0].item(), bool(x[1]), float(x[2]), int(x[3]), x.nonzero(), x + 1
        counter.in_forward = 1
        x.sum().item()
        counter.active = False
        x.tolist()
    assert counter.counts == {"syncs_engine": 6, "syncs_forward": 1}
    with measure_module.SyncCounter(torch.device("cuda")) as counter:  # a CPU tensor never waits for a GPU
        counter.active = True
        x.tolist(), x.cpu()
    assert counter.counts == {"syncs_engine": 0, "syncs_forward": 0}


def test_a_forward_that_ignores_the_cache_is_refused(measure_module, monkeypatch):
    from rsd.models.adapter import CausalLM

    monkeypatch.setattr(CausalLM, "forward", lambda self, tokens, positions, attend, last=0: None)
    with pytest.raises(SystemExit, match="cannot run rsd's forward .*left 0 of 4 tokens"):
        measure_module.check_forward(torch.float32)


class _Probe(torch.nn.Module):
    def forward(self, x):
        return x.sum().item()


class _FakeEngine:
    """Steps of max_depth 5, 3, 1 after a depth-3 drafter: each reads `max_depth` values back and runs one forward."""

    def __init__(self):
        model = _Probe()
        self.target = types.SimpleNamespace(model=model, device=torch.device("cpu"))
        self.draft = None
        self.drafter = types.SimpleNamespace(draft_length=3)

    def step(self, committed, gen, out, max_depth=None, *rest):
        [torch.zeros(1).item() for _ in range(max_depth)]
        self.target.model(torch.ones(2))

    def generate(self, prompt, new_tokens, gen):
        for max_depth in (5, 3, 1):
            self.step(prompt, gen, None, max_depth)


def test_syncs_per_step_counts_full_depth_steps_and_splits_forwards(measure_module):
    engine = _FakeEngine()
    assert measure_module.syncs_per_step(engine, [1], 1) == {"syncs_engine": 4.0, "syncs_forward": 1.0}
    assert "step" not in vars(engine) and not engine.target.model._forward_pre_hooks  # instrumentation removed
