"""The benchmarks must not rot: run gpu_paper_shapes on CPU scaled down (same code path as the GPU run)."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def test_gpu_paper_shapes_scaled_down(capsys):
    sys.path.insert(0, str(BENCH))
    try:
        import gpu_paper_shapes
    finally:
        sys.path.remove(str(BENCH))
    rows = gpu_paper_shapes.main(["--scale-down", "--prompts", "1", "--prompt-tokens", "16", "--max-new-tokens", "6",
                                  "--shapes", "ar,sd L=4,rsd_s 3x4"])
    printed = capsys.readouterr().out
    assert len(rows) == 6 and {r["pair"] for r in rows} == set(gpu_paper_shapes.PAIRS)
    for row in rows:
        assert row["target_fwd"] > 0 and 0 <= row["outside"] < 1 and row["rate"] > 0
        assert (row["draft_fwd"] > 0) == (row["method"] != "ar")
    assert "target forward ms vs tokens scored" in printed and "SCALED DOWN" in printed


def test_static_compile_static_path_matches_eager(capsys):
    """The benchmark's static-shape path (fixed KV buffer, padded queries, mask and slot buffers), uncompiled, gives
    eager's logits on the tiny pairs."""
    sys.path.insert(0, str(BENCH))
    try:
        import static_compile
    finally:
        sys.path.remove(str(BENCH))
    rows = static_compile.main(["--pairs", "tiny-llama,tiny-opt", "--modes", "", "--reps", "1"])
    assert [(r["q"], r["pad"]) for r in rows] == [(1, 1), (5, 14), (14, 14), (1, 1)] * 2
    assert all(r["diff"]["static"] < 1e-5 for r in rows), rows
    assert "tiny opt draft" in capsys.readouterr().out
