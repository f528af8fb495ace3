"""A Hydra callback that writes the analysis report when a sweep ends (registered by conf/experiment/quickstart.yaml).

    hydra:
      callbacks:
        report:
          _target_: analysis.callback.ReportOnSweepEnd
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.utils import to_absolute_path
from omegaconf import DictConfig


class ReportOnSweepEnd(Callback):
    """After a multirun: report on `out_dir` into `<out_dir>/report`, print the block-efficiency tables, the ranking
    lines and the path."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Build and announce the report; a failure is printed, never raised (the sweep itself succeeded)."""
        out_dir = Path(to_absolute_path(config.out_dir))
        try:
            from analysis.report import build_report

            report = build_report([out_dir], out_dir / "report")
        except Exception as err:  # the sweep's results are safe: say so and carry on
            print(f"[rsd] the sweep finished (results in {out_dir}), but its report failed: {type(err).__name__}: "
                  f"{err}\n[rsd] retry with: python -m analysis.report {out_dir} --out {out_dir / 'report'}")
            return
        print(report.markdown["block_efficiency"])
        if report.rankings:
            print("Rankings (Holm-adjusted p of each gap; table_pairs.md):\n" + "\n".join(report.rankings))
        print(f"[rsd] report: {report.out}")
