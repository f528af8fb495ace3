"""Write the whole report of a set of run directories: tidy tables (Parquet, CSV), markdown tables, figures.

    python -m analysis.report RUN_DIRS... --out DIR

Layout of DIR: runs.{parquet,csv} (one row per run), prompts.{parquet,csv} (one per prompt), steps.{parquet,csv}
(one per target call), table_<metric>.md (block_efficiency, expected_block_efficiency where recorded, mbsu,
token_rate_ratio; '–' with a footnote for the acceptance dial's runs, whose draft runs the target), table_optimum.md
(root acceptance, root optimum alpha* and fraction of the optimum per method and point), table_pairs.md (paired
comparisons and a ranking line per budget point, per dataset and pooled over datasets), table_greedy.md (greedy
runs: where the output first differs from AR's; only with greedy runs), table_selection.md (shapes ranked on
tuning prompts; only with tuning runs), table_expectation.md (measured vs exact expected block efficiency, run by
run), table_compute.md (process hours per setting),
figures/<setting>_<kind>.{png,pdf}, figures/<setting>_<kind>_acceptance.{png,pdf},
figures/<setting>_<kind>_optimum.{png,pdf} (fraction of the optimum; runs that record it) and, for the acceptance
dial, figures/<setting without mix>_<kind>_dial.{png,pdf} (each method's gain over SD against SD's acceptance, one
point per mix).
Only complete runs whose summary agrees with their records are read (analysis.load); every other run directory is
named, with the reason, and the report is built from the rest. Runs over different prompt sets (or pairs, dtypes,
datasets, sampling settings) are kept apart: each group gets its own tables, labelled with its prompt set. The
`run_dir` column of the written tables is relative to the results directories given (their common parent), so a
report regenerated on another machine writes the same files.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.columns import SETTING
from analysis.expectation import expectation_check
from analysis.figures import figures, save
from analysis.load import Tables, load
from analysis.names import KINDS, setting_title
from analysis.pair_tables import pairs_markdown, ranking_lines
from analysis.pairs import all_pairs, pooled_best
from analysis.run_tables import compute_table, greedy_table, selection_table
from analysis.tables import all_tables, best_shapes, optimum_table


@dataclass(frozen=True)
class Report:
    """What a report run produced: its directory, the tidy tables, markdown per table name (table_<name>.md), the
    paired comparisons, the ranking lines (one per budget point) and every file written."""

    out: Path
    tables: Tables
    markdown: dict[str, str]
    pairs: pd.DataFrame
    rankings: list[str]
    files: list[Path]


def results_root(inputs: Iterable[Path | str]) -> Path:
    """The directory run paths are written relative to: the results directory given, or the common parent of several."""
    return Path(os.path.commonpath([os.path.abspath(p) for p in inputs]))


def relative_runs(frame: pd.DataFrame, root: Path) -> pd.DataFrame:
    """`frame` with its run_dir column relative to `root`."""
    return frame.assign(run_dir=[os.path.relpath(d, root) for d in frame["run_dir"]])


def write_tables(tables: Tables, out: Path, compact: bool = False, root: Path | None = None) -> list[Path]:
    """Write runs, prompts and steps as Parquet and CSV into `out` (compact: only runs.csv), run_dir relative to
    `root` when given."""
    def frame_of(name: str) -> pd.DataFrame:
        frame = getattr(tables, name)
        return frame if root is None else relative_runs(frame, root)

    if compact:
        frame_of("runs").to_csv(out / "runs.csv", index=False)
        return [out / "runs.csv"]
    paths = []
    for name in ("runs", "prompts", "steps"):
        frame = frame_of(name)
        frame.to_parquet(out / f"{name}.parquet", index=False)
        frame.to_csv(out / f"{name}.csv", index=False)
        paths += [out / f"{name}.parquet", out / f"{name}.csv"]
    return paths


def write_markdown(markdown: dict[str, str], out: Path) -> list[Path]:
    """Write one table_<name>.md per entry into `out`."""
    paths = [out / f"table_{metric}.md" for metric in markdown]
    for path, text in zip(paths, markdown.values()):
        path.write_text(text, encoding="utf-8")
    return paths


def write_figures(tables: Tables, out: Path, compact: bool = False) -> list[Path]:
    """Draw and save every figure (PNG and PDF; compact: PNG only) into `out`/figures."""
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    formats = ("png",) if compact else ("png", "pdf")
    return [path for stem, fig in figures(tables) for path in save(fig, fig_dir / stem, formats)]


def build_report(inputs: Iterable[Path | str], out: Path | str, compact: bool = False,
                 pool_sets: bool = True) -> Report:
    """Load every usable completed run under `inputs` and write the tables, markdown and figures into `out`.

    `compact` (a report to commit): the runs table as CSV, the markdown tables and PNG figures only. `pool_sets`:
    also compare methods on the prompts of every dataset together (pooled_best); off, every comparison is per set.
    """
    out, inputs = Path(out), list(inputs)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is a file, not a directory: give a directory for the report")
    tables = load(inputs)
    root = results_root(inputs)
    out.mkdir(parents=True, exist_ok=True)
    markdown = all_tables(tables.runs, tables.prompts)
    best = best_shapes(tables.runs, tables.prompts)
    optimum = optimum_table(best)
    pooled = pooled_best(best, tables.prompts) if pool_sets else pd.DataFrame()
    pairs = all_pairs(best, tables.runs, tables.prompts, pooled)
    best = pd.concat([best, pooled], ignore_index=True) if len(pooled) else best
    markdown["pairs"] = pairs_markdown(best, pairs)
    extra = {"optimum": optimum, "greedy": greedy_table(tables.runs, tables.prompts),
             "selection": selection_table(tables.runs),
             "expectation": expectation_check(tables.runs, tables.prompts),
             "compute": compute_table(tables.runs)}
    markdown.update({name: text for name, text in extra.items() if text})
    rankings = []
    for keys, lines in ranking_lines(best, pairs).items():
        rankings += [f"{setting_title(dict(zip(SETTING, keys)))}; {KINDS[keys[-1]][0]}:", *(f"  {x}" for x in lines)]
    if len(pairs):
        pairs.to_csv(out / "pairs.csv", index=False)
    files = (write_tables(tables, out, compact, root) + ([out / "pairs.csv"] if len(pairs) else [])
             + write_markdown(markdown, out) + write_figures(tables, out, compact))
    return Report(out, tables, markdown, pairs, rankings, files)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: build the report, print its markdown tables and where it is; 1 if there is nothing."""
    parser = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__.split("\n")[0])
    parser.add_argument("inputs", nargs="+", type=Path, help="directories searched recursively for run directories")
    parser.add_argument("--out", type=Path, default=Path("reports"), help="output directory (default: reports)")
    parser.add_argument("--compact", action="store_true",
                        help="write only runs.csv, the markdown tables and PNG figures (a report to commit)")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(levelname)s: %(message)s", level=logging.INFO)
    try:
        report = build_report(args.inputs, args.out, args.compact)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("\n".join(report.markdown[name] for name in report.markdown if name != "pairs"))
    if report.tables.skipped:
        print(f"Skipped {len(report.tables.skipped)} run(s) that are not complete or whose summary "
              "disagrees with its records:\n" + "\n".join(f"  {line}" for line in report.tables.skipped))
    if report.rankings:
        print("Rankings (Holm-adjusted p of each gap; details in table_pairs.md):\n" + "\n".join(report.rankings))
    print(f"report ({len(report.tables.runs)} runs, {len(report.files)} files): {report.out.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
