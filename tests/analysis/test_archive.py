"""Records archives: one per budget directory, byte-identical when regenerated, rewritten only when runs change."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from analysis.archive import archive_name, budget_dirs, main, pack, unpack


def make_run(root: Path, budget: str, leaf: str, records: str = '{"i": 0}\n', sampling: str = "T1-k0-p1-n32"
             ) -> Path:
    run = root / "pair" / "dolly_builtin" / sampling / budget / leaf
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"method": "sd"}')
    (run / "records.jsonl").write_text(records)
    (run / "run.lock").write_text("pid 1")
    return run


@pytest.fixture
def study(tmp_path: Path) -> Path:
    root = tmp_path / "results" / "study-x"
    make_run(root, "L2", "sd-L2-s0-aaaa")
    make_run(root, "L2", "tv-b3-1-s0-bbbb")
    make_run(root, "B6", "sd-L6-s0-cccc")
    make_run(root / "tuning", "B6", "rsd_c-b2-1-1-s0-eeee", sampling="T1-k0-p1-n16")
    (root / ".hydra").mkdir()
    (root / ".hydra" / "config.yaml").write_text("x: 1")
    return root


def test_one_archive_per_budget_directory_without_locks(study: Path, tmp_path: Path) -> None:
    written = pack(study, tmp_path / "archives")
    assert [p.name for p in written] == ["study-x__pair__dolly_builtin__T1-k0-p1-n32__B6.tar.gz",
                                         "study-x__pair__dolly_builtin__T1-k0-p1-n32__L2.tar.gz",
                                         "study-x__tuning__pair__dolly_builtin__T1-k0-p1-n16__B6.tar.gz"]
    with tarfile.open(written[1]) as tar:
        names = tar.getnames()
        assert all(m.mtime == 0 and m.uid == 0 for m in tar.getmembers())
    assert names == ["study-x/pair/dolly_builtin/T1-k0-p1-n32/L2/sd-L2-s0-aaaa/records.jsonl",
                     "study-x/pair/dolly_builtin/T1-k0-p1-n32/L2/sd-L2-s0-aaaa/run.json",
                     "study-x/pair/dolly_builtin/T1-k0-p1-n32/L2/tv-b3-1-s0-bbbb/records.jsonl",
                     "study-x/pair/dolly_builtin/T1-k0-p1-n32/L2/tv-b3-1-s0-bbbb/run.json"]


def test_unchanged_runs_leave_archives_byte_identical(study: Path, tmp_path: Path) -> None:
    out = tmp_path / "archives"
    first = {p.name: p.read_bytes() for p in pack(study, out)}
    for run_json in study.rglob("run.json"):  # new times on every file: the bytes must not depend on them
        run_json.touch()
    assert pack(study, out) == []
    make_run(study, "L2", "rsd_s-W3xL2-s0-dddd")
    rewritten = pack(study, out)
    assert [p.name for p in rewritten] == [archive_name(study, study / "pair/dolly_builtin/T1-k0-p1-n32/L2")]
    assert (out / "study-x__pair__dolly_builtin__T1-k0-p1-n32__B6.tar.gz").read_bytes() == first[
        "study-x__pair__dolly_builtin__T1-k0-p1-n32__B6.tar.gz"]
    assert not list(out.glob("*.tmp"))


def test_unpack_restores_the_records(study: Path, tmp_path: Path) -> None:
    out = tmp_path / "archives"
    main(["pack", str(study), str(out)])
    dest = tmp_path / "restored"
    main(["unpack", str(out), str(dest)])
    restored = dest / "study-x"
    assert budget_dirs(restored) == [*(restored / "pair/dolly_builtin/T1-k0-p1-n32" / b for b in ("B6", "L2")),
                                     restored / "tuning/pair/dolly_builtin/T1-k0-p1-n16/B6"]
    for path in study.rglob("records.jsonl"):
        assert (restored / path.relative_to(study)).read_text() == path.read_text()
    assert not list(restored.rglob("*.lock"))


def test_nothing_to_pack_or_unpack_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no runs below"):
        pack(tmp_path, tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="no .*archives"):
        unpack(tmp_path, tmp_path / "dest")
    with pytest.raises(SystemExit, match=r"^analysis.archive unpack: no \*.tar.gz archives in "):
        main(["unpack", str(tmp_path), str(tmp_path / "dest")])
