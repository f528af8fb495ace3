"""A study edition's folder, regenerated from its committed records archives alone, in one command.

Unpacks the edition's archives (runs/, and where present rates/runs/, control/runs/ and shared/) into a temporary
directory, builds the rates/ and control/ reports and the edition there (analysis.edition), and either writes the
result to --out or, with --check, compares every file it generated with the committed one, byte for byte.
speedup.txt (a benchmark's output, not a record) is taken as it is committed.

    python -m analysis.regenerate docs/results/embedded-eagle --check
    python -m analysis.regenerate docs/results/embedded-eagle --out /tmp/edition
    python -m analysis.regenerate docs/results/embedded-eagle --out docs/results/embedded-eagle   (in place)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from analysis.archive import unpack
from analysis.edition import write_edition

INPUTS = ("speedup.txt",)  # committed beside the generated files, read by the page


def regenerate(docs: Path, out: Path, work: Path) -> list[Path]:
    """Write into `out` every file the edition in `docs` generates, from `docs`' archives unpacked into `work`."""
    if not (docs / "runs").is_dir():
        raise FileNotFoundError(f"{docs / 'runs'}: no records archives (is {docs} a study edition's folder?)")
    for archives in (docs / "runs", docs / "rates" / "runs", docs / "control" / "runs", docs / "shared"):
        if archives.is_dir():
            unpack(archives, work)
    results = {part: work / f"{docs.name}{part}" for part in ("", "-rates", "-control", "-shared")}
    present = {part: path if path.is_dir() else None for part, path in results.items()}
    if present[""] is None:
        raise FileNotFoundError(f"{docs / 'runs'}: the archives hold no {docs.name} results")
    out.mkdir(parents=True, exist_ok=True)
    for name in INPUTS:
        if (docs / name).is_file() and (docs / name).resolve() != (out / name).resolve():
            shutil.copyfile(docs / name, out / name)
    return write_edition([present[""]], out, present["-control"], present["-shared"], present["-rates"])


def differing(generated: list[Path], out: Path, docs: Path) -> list[str]:
    """The generated files (relative to `out`) that are missing from `docs` or differ from it byte for byte."""
    rel = sorted({p.relative_to(out) for p in generated if p.is_file()})
    return [str(r) for r in rel if not (docs / r).is_file() or (docs / r).read_bytes() != (out / r).read_bytes()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.regenerate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("docs", type=Path, help="the edition's folder, e.g. docs/results/embedded-eagle")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", type=Path, help="write the regenerated folder here")
    mode.add_argument("--check", action="store_true", help="compare what it generates with the committed files")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rsd-regenerate-") as tmp:
        out = Path(tmp) / "edition" if args.check else args.out
        try:
            generated = regenerate(args.docs, out, Path(tmp) / "records")
        except FileNotFoundError as err:
            print(f"analysis.regenerate: {err}", file=sys.stderr)
            return 2
        files = sum(p.is_file() for p in generated)
        if not args.check:
            print(f"{files} file(s) regenerated into {out} in {time.perf_counter() - start:.0f} s")
            return 0
        changed = differing(generated, out, args.docs)
    seconds = time.perf_counter() - start
    if changed:
        print(f"{len(changed)} of {files} generated file(s) differ from {args.docs} ({seconds:.0f} s):\n  "
              + "\n  ".join(changed))
        return 1
    print(f"all {files} generated file(s) are byte-identical to {args.docs} ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
