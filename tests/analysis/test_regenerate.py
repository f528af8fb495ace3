"""One command regenerates an edition's folder from its records archives and checks it byte for byte
(analysis/regenerate.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from analysis.archive import pack
from analysis.regenerate import differing, main
from helpers.runs import record, write_run

STEPS = {"sd": ([1, 1, 0, 1], [0, 1], [1, 1, 1]), "spectr": ([2, 2, 1, 2], [1, 2], [2, 1, 2])}


def study(root: Path) -> None:
    """AR, SD and SpecTr at L = 2 on three prompts, laid out as a study's out_dir."""
    sampling = root / "pairA" / "dolly_builtin" / "T1-k0-p1-n32"
    write_run(sampling / "no-draft", "ar", "ar", {}, "none", None, None,
              [record(f"p{i}", [0] * 4, 2.0, 50.0, 0, 0) for i in range(3)], 50.0)
    for method, steps in STEPS.items():
        write_run(sampling / "L2", method, method, {"draft_length": 2}, "L2", "fixed_length", 2,
                  [record(f"p{i}", a, 1.0, 50.0, 2, 2) for i, a in enumerate(steps)], 50.0)


def committed_edition(tmp_path: Path) -> Path:
    """docs/<edition>: the archives of the runs, the rates pass and the control pass, a benchmark output, and what
    they regenerate."""
    docs = tmp_path / "docs" / "edition-x"
    for part, archives in (("", docs / "runs"), ("-rates", docs / "rates" / "runs"),
                           ("-control", docs / "control" / "runs")):
        study(tmp_path / "results" / f"edition-x{part}")
        pack(tmp_path / "results" / f"edition-x{part}", archives)
    (docs / "speedup.txt").write_text("$ python benchmarks/speedup.py\n")
    assert main([str(docs), "--out", str(tmp_path / "generated")]) == 0
    shutil.copytree(tmp_path / "generated", docs, dirs_exist_ok=True)
    return docs


def test_the_regenerated_folder_is_byte_identical(tmp_path, capsys):
    docs = committed_edition(tmp_path)
    assert (docs / "rates" / "runs.csv").is_file() and (docs / "control" / "runs.csv").is_file()
    assert "speedup.txt" in (docs / "README.md").read_text() and (docs / "control.csv").stat().st_size > 1
    capsys.readouterr()
    assert main([str(docs), "--check"]) == 0
    assert "byte-identical" in capsys.readouterr().out


def test_a_changed_or_missing_file_is_named(tmp_path):
    out, docs = tmp_path / "out", tmp_path / "docs"
    for root in (out, docs):
        (root / "rates").mkdir(parents=True)
        for name in ("answers.csv", "README.md", "rates/costs.csv"):
            (root / name).write_text("a,b\n")
    (docs / "answers.csv").write_text("a,b\n\n")
    (docs / "rates" / "costs.csv").unlink()
    generated = [out / "answers.csv", out / "README.md", out / "rates" / "costs.csv", out / "rates"]
    assert differing(generated, out, docs) == ["answers.csv", "rates/costs.csv"]


def test_a_folder_without_archives_is_refused_in_one_line(tmp_path, capsys):
    assert main([str(tmp_path), "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("analysis.regenerate: ") and "no records archives" in err and len(err.splitlines()) == 1
