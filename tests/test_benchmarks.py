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
