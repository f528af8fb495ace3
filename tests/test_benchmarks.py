"""The benchmarks must not rot: run gpu_paper_shapes on CPU scaled down (same code path as the GPU run)."""

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def test_gpu_paper_shapes_scaled_down(capsys):
    sys.path.insert(0, str(BENCH))
    try:
        import gpu_paper_shapes
    finally:
        sys.path.remove(str(BENCH))
    rows = gpu_paper_shapes.main(["--scale-down", "--prompts", "1", "--prompt-tokens", "16", "--max-new-tokens", "6",
                                  "--shapes", "ar,sd L=4,rsd_s 3x4", "--static", "buffers"])
    printed = capsys.readouterr().out
    assert len(rows) == 6 and {r["pair"] for r in rows} == set(gpu_paper_shapes.PAIRS)
    for row in rows:
        assert row["target_fwd"] > 0 and 0 <= row["outside"] < 1 and row["rate"] > 0
        assert (row["draft_fwd"] > 0) == (row["method"] != "ar")
    assert "target forward ms vs tokens scored" in printed and "SCALED DOWN" in printed


def test_speedup_prints_ratios_with_cis_and_per_position_acceptance(capsys):
    """Tokens per call is at most 1 + the sum of the per-position acceptance columns (a step emits its accepted
    tokens plus one, fewer only when an EOS ends the text; no shape drafts more than the 4 positions shown), the
    columns never increase with the position, and every drafted row has a CI."""
    sys.path.insert(0, str(BENCH))
    try:
        import speedup
    finally:
        sys.path.remove(str(BENCH))
    speedup.main(["--pair", "tiny", "--prompts", "1", "--max-new-tokens", "12", "--temperatures", "1",
                  "--methods", "sd L=4,eagle2 k3xL4xN12,rsd_s 3x4"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line.split() and line.split()[0] in ("ar", "sd", "eagle2", "rsd_s")]
    assert [r[0] for r in rows] == ["ar", "sd", "eagle2", "rsd_s"]
    for row in rows:
        be, accs = float(row[1 if row[0] == "ar" else 2]), [float(x) for x in row[-4:]]  # labels: 1 or 2 words
        assert accs == sorted(accs, reverse=True) and be <= 1 + sum(accs) + 0.006, row
    assert all("(" in " ".join(r) and "p=" in " ".join(r) for r in rows[1:])


def test_speedup_refuses_an_unknown_set_before_loading_a_model(capsys):
    sys.path.insert(0, str(BENCH))
    try:
        import speedup
    finally:
        sys.path.remove(str(BENCH))
    with pytest.raises(SystemExit) as exit_:
        speedup.main(["--pair", "tiny", "--sets", "xsum_builtin,nope"])
    assert exit_.value.code == 2 and "--sets nope: unknown; the built-in sets are" in capsys.readouterr().err
