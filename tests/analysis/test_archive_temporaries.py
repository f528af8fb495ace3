"""Records archives leave out a live run's atomic-write temporaries: the same finished runs give the same bytes."""

from __future__ import annotations

import tarfile
from pathlib import Path

from analysis.archive import pack

BUDGET = Path("pair") / "dolly_builtin" / "T1-k0-p1-n32" / "L2"


def test_archives_skip_temporaries_and_stay_byte_identical(tmp_path: Path) -> None:
    """A `.tmp` left by the store's atomic writes (a run being written, or killed mid-write) is not packed, and the
    archive's bytes are those of the same study without it."""
    root = tmp_path / "results" / "study-x"
    run = root / BUDGET / "sd-L2-s0-aaaa"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"method": "sd"}')
    (run / "records.jsonl").write_text('{"i": 0}\n')
    [clean] = pack(root, tmp_path / "clean")
    (run / ".records.jsonl.4242.0badc0de.tmp").write_text('{"i": 0}\n{"i": 1')  # torn mid-write
    (run / ".summary.json.4242.deadbeef.tmp").write_text("{")
    [with_tmp] = pack(root, tmp_path / "with_tmp")
    with tarfile.open(with_tmp) as tar:
        assert tar.getnames() == [f"study-x/{BUDGET.as_posix()}/sd-L2-s0-aaaa/{name}"
                                  for name in ("records.jsonl", "run.json")]
    assert with_tmp.read_bytes() == clean.read_bytes()
