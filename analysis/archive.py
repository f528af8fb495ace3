"""Records archives that regenerate byte for byte: one gzip'd tar per budget directory of a study's out_dir, so a
study committed in growing pieces adds a new archive only where runs were added or changed.

    python -m analysis.archive pack results/study/embedded-v3 docs/results/embedded-v3/runs
    python -m analysis.archive unpack docs/results/embedded-v3/runs results/study
"""

from __future__ import annotations

import argparse
import gzip
import io
import tarfile
from pathlib import Path

from rsd.harness.files import write_bytes_atomic

SKIPPED_SUFFIXES = (".lock", ".tmp")


def budget_dirs(root: Path) -> list[Path]:
    """The budget directories below a study's out_dir, those holding run directories: pair/dataset/sampling/budget,
    and tuning/pair/dataset/sampling/budget for the tuning runs of a fixed-compute selection."""
    return sorted({run_json.parent.parent for run_json in Path(root).rglob("run.json")})


def archive_name(root: Path, budget_dir: Path) -> str:
    """`<out_dir name>__<pair>__<dataset>__<sampling>__<budget>.tar.gz` (with `__tuning` after the out_dir name for
    tuning runs): a flat, sortable name per budget directory."""
    return "__".join((Path(root).name, *budget_dir.relative_to(root).parts)) + ".tar.gz"


def archive_bytes(root: Path, budget_dir: Path) -> bytes:
    """A gzip'd tar of every file below `budget_dir` (locks and temporaries left out), named from `root`'s parent.

    Members are sorted and carry no time, owner or mode of this machine, and gzip stores no time or name, so the same
    files give the same bytes on any machine.
    """
    files = sorted(p for p in budget_dir.rglob("*") if p.is_file() and not p.name.endswith(SKIPPED_SUFFIXES))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(path.relative_to(Path(root).parent).as_posix())
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def pack(root: Path, out: Path) -> list[Path]:
    """Write one archive per budget directory of `root` into `out`; returns those written (an archive whose bytes
    would not change is left alone). Each write is atomic, so a crash leaves no torn archive."""
    root, out = Path(root), Path(out)
    dirs = budget_dirs(root)
    if not dirs:
        raise FileNotFoundError(f"no runs below {root}: expected <pair>/<dataset>/<sampling>/<budget>/<run>/run.json")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for budget_dir in dirs:
        target = out / archive_name(root, budget_dir)
        data = archive_bytes(root, budget_dir)
        if target.exists() and target.read_bytes() == data:
            continue
        write_bytes_atomic(target, data)
        written.append(target)
    return written


def unpack(archives: Path, dest: Path) -> list[Path]:
    """Extract every `*.tar.gz` in `archives` into `dest` (tar's `data` filter: no path may leave `dest`)."""
    paths = sorted(Path(archives).glob("*.tar.gz"))
    if not paths:
        raise FileNotFoundError(f"no *.tar.gz archives in {archives}")
    Path(dest).mkdir(parents=True, exist_ok=True)
    for path in paths:
        with tarfile.open(path, "r:gz") as tar:
            tar.extractall(dest, filter="data")
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="a study's out_dir -> one archive per budget directory")
    p.add_argument("root", type=Path)
    p.add_argument("out", type=Path)
    u = sub.add_parser("unpack", help="a folder of archives -> the directory holding the study's out_dir")
    u.add_argument("archives", type=Path)
    u.add_argument("dest", type=Path)
    args = ap.parse_args(argv)
    try:
        if args.command == "pack":
            written = pack(args.root, args.out)
            unchanged = len(budget_dirs(args.root)) - len(written)
            print(f"{len(written)} archive(s) written in {args.out}, {unchanged} unchanged")
        else:
            print(f"{len(unpack(args.archives, args.dest))} archive(s) extracted into {args.dest}")
    except FileNotFoundError as err:
        raise SystemExit(f"analysis.archive {args.command}: {err}") from None


if __name__ == "__main__":
    main()
