"""Figures in the paper's layout (matplotlib, Agg canvas, no pyplot state), PNG and PDF.

Per (model pair, dataset, sampling setting, budget kind): a row of four panels (block efficiency, MBSU, token rate
and accuracy as ratios to AR) against draft length or target tokens, one line per method (best shape per point, see
analysis.tables), error bars = standard error over prompts (ratios: per-prompt value / the AR run's value); AR is a
dashed horizontal line with a shaded +-1 SE band. Plus acceptance rate by tree depth, one panel per budget point.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from analysis.load import Tables
from analysis.tables import KINDS, best_shapes, method_label, method_order, setting_title, settings

COLORS = {"ar": "#3a3a3a", "sd": "#1f77b4", "specinfer": "#ff7f0e", "spectr": "#2ca02c", "rsd_c": "#d62728",
          "rsd_s": "#9467bd"}
MARKERS = {"ar": "", "sd": "o", "specinfer": "s", "spectr": "^", "rsd_c": "D", "rsd_s": "v"}
FALLBACK_COLORS = ("#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f", "#1b9e77", "#e6ab02", "#a6761d")
FALLBACK_MARKERS = ("P", "X", "*", "h", "p", "<", ">", "d")
PANELS = (  # column, panel title, y label (with units)
    ("block_efficiency", "Block efficiency", "tokens per target call"),
    ("mbsu", "MBSU", "memory-bound speed-up (×)"),
    ("token_rate_ratio", "Token rate", "token rate / AR token rate (×)"),
    ("accuracy_ratio", "Accuracy", "task score / AR task score (×)"),
)
EMPTY = {"token_rate_ratio": "no ratio: no matching AR run",
         "accuracy_ratio": "no ratio: no task scores,\nno matching AR run or an AR score of 0"}
XLABELS = {"fixed_length": "draft length L (tokens)", "fixed_compute": "target budget B (drafted tokens per call)"}
STYLE = {"font.size": 11, "axes.titlesize": 13, "axes.labelsize": 11, "legend.fontsize": 11, "xtick.labelsize": 10,
         "ytick.labelsize": 10, "figure.titlesize": 13, "axes.spines.top": False, "axes.spines.right": False,
         "axes.grid": True, "grid.alpha": 0.3, "lines.linewidth": 1.8, "lines.markersize": 6}


def method_styles(methods: Iterable[str]) -> dict[str, dict[str, str]]:
    """Colour and marker per method: fixed for the built-ins, a fallback palette (in name order) for the others."""
    others = [m for m in method_order(methods) if m not in COLORS]
    styles = {m: {"color": COLORS[m], "marker": MARKERS[m]} for m in COLORS}
    styles.update({m: {"color": FALLBACK_COLORS[i % len(FALLBACK_COLORS)],
                       "marker": FALLBACK_MARKERS[i % len(FALLBACK_MARKERS)]} for i, m in enumerate(others)})
    return styles


def standard_error(values: pd.Series) -> float:
    """Standard error of the mean of the finite values (0 for fewer than two)."""
    finite = values[np.isfinite(values.astype(float))]
    return float(finite.std(ddof=1) / math.sqrt(len(finite))) if len(finite) > 1 else 0.0


def with_errors(best: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """`best` plus `<metric>_se` per panel metric, over the prompts of the runs behind each row."""
    by_run = prompts.set_index("run_dir")
    out = best.copy()
    for metric, _, _ in PANELS:
        out[f"{metric}_se"] = [standard_error(by_run.loc[dirs, metric]) for dirs in best["run_dirs"]]
    return out


def draw_baseline(ax: Axes, row: pd.Series, metric: str, style: Mapping[str, str], label: str) -> None:
    """A method without a budget (AR): a dashed horizontal line with a +-1 SE band."""
    value, se = row[metric], row[f"{metric}_se"]
    ax.axhline(value, color=style["color"], linestyle="--", linewidth=1.5, label=label)
    if np.isfinite(value) and se > 0:
        ax.axhspan(value - se, value + se, color=style["color"], alpha=0.12, linewidth=0)


def draw_method(ax: Axes, rows: pd.DataFrame, metric: str, style: Mapping[str, str], label: str) -> None:
    """One method's line over the budget points, with standard-error bars."""
    x, y = rows["x"].to_numpy(float), rows[metric].to_numpy(float)
    ax.plot(x, y, color=style["color"], marker=style["marker"], label=label)
    ax.errorbar(x, y, yerr=rows[f"{metric}_se"].to_numpy(float), fmt="none", ecolor=style["color"], elinewidth=1.2,
                capsize=3, alpha=0.8)


def new_figure(width: float, height: float) -> Figure:
    """A constrained-layout figure on an Agg canvas (headless, no pyplot)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def figure_legend(fig: Figure, axes: Iterable[Axes]) -> None:
    """One legend below the panels, each method once, in drawing order."""
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncols=len(entries), frameon=False)


def performance_figure(best: pd.DataFrame, kind: str, title: str, styles: Mapping[str, Mapping[str, str]]) -> Figure:
    """Four panels (BE, MBSU, token-rate ratio, accuracy ratio) against the budget points, one line per method."""
    points = sorted(best.loc[best["budget"] == kind, "x"].unique())
    with mpl.rc_context(STYLE):
        fig = new_figure(17, 4.6)
        axes = fig.subplots(1, len(PANELS), sharex=True)
        for ax, (metric, name, ylabel) in zip(axes, PANELS):
            for method in method_order(best["method"]):
                rows = best[best["method"] == method]
                drafted = rows[rows["budget"] == kind].sort_values("x")
                if rows["budget"].isna().all():
                    draw_baseline(ax, rows.iloc[0], metric, styles[method], method_label(method))
                elif not drafted.empty:
                    draw_method(ax, drafted, metric, styles[method], method_label(method))
            ax.set(title=name, xlabel=XLABELS[kind], ylabel=ylabel, xticks=points)
            if not np.isfinite(best[metric].to_numpy(float)).any():
                ax.text(0.5, 0.5, EMPTY.get(metric, "no data"), transform=ax.transAxes, ha="center", va="center",
                        color="0.4")
                ax.set_yticks([])
        figure_legend(fig, axes)
        fig.suptitle(f"{title}; {KINDS[kind][0]} (best shape per point, error bars: ±1 SE over prompts)")
    return fig


def acceptance_figure(best: pd.DataFrame, kind: str, title: str, styles: Mapping[str, Mapping[str, str]]) -> Figure:
    """Fraction of steps whose accepted path reached depth d, one panel per budget point, one line per method."""
    drafted = best[best["budget"] == kind]
    points = sorted(drafted["x"].unique())
    accepts = [c for c in best.columns if c.startswith("accept_d")]
    ncols = min(len(points), 5)
    nrows = math.ceil(len(points) / ncols)
    with mpl.rc_context(STYLE):
        fig = new_figure(max(3.4 * ncols + 0.8, 8.0), 3.2 * nrows + 1.4)
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True).ravel()
        for ax, x in zip(axes, points):
            for method in method_order(drafted["method"]):
                rows = drafted[(drafted["method"] == method) & (drafted["x"] == x)]
                if rows.empty:
                    continue
                rates = rows.iloc[0][accepts].to_numpy(float)
                depth = np.arange(1, len(rates) + 1)[np.isfinite(rates)]
                ax.plot(depth, rates[np.isfinite(rates)], label=method_label(method), **styles[method])
            ax.set(title=f"{KINDS[kind][1]} = {x}", xlabel="tree depth d", ylim=(0, 1.02))
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        for ax in axes[::ncols]:
            ax.set_ylabel("steps reaching depth d (fraction)")
        for ax in axes[len(points):]:
            ax.set_visible(False)
        figure_legend(fig, axes[:len(points)])
        fig.suptitle(f"Acceptance by tree depth, {KINDS[kind][0]} (best shape per point)\n{title}")
    return fig


def slug(setting: Mapping[str, Any], kind: str) -> str:
    """A file-name stem for a (setting, budget kind)."""
    name = (f"{setting['model_pair']}_{setting['dataset']}_T{setting['temperature']:g}-k{setting['top_k']}"
            f"-p{setting['top_p']:g}-n{setting['max_new_tokens']}_{kind}")
    return re.sub(r"[^\w.-]+", "-", name)


def figures(tables: Tables) -> Iterator[tuple[str, Figure]]:
    """(file stem, figure) for every setting and budget kind: the four-panel figure, then acceptance by depth."""
    best = with_errors(best_shapes(tables.runs), tables.prompts)
    styles = method_styles(tables.runs["method"])
    for setting, group in settings(best):
        for kind in (k for k in KINDS if (group["budget"] == k).any()):
            title = setting_title(setting)
            yield slug(setting, kind), performance_figure(group, kind, title, styles)
            yield f"{slug(setting, kind)}_acceptance", acceptance_figure(group, kind, title, styles)


def save(fig: Figure, stem: Path) -> list[Path]:
    """Write `stem`.png (150 dpi) and `stem`.pdf; returns both paths."""
    paths = [stem.parent / f"{stem.name}.{ext}" for ext in ("png", "pdf")]
    for path in paths:
        fig.savefig(path, dpi=150)
    return paths
