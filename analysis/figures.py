"""Figures in the paper's layout (matplotlib, Agg canvas, no pyplot state), PNG and PDF.

Per (model pair, dataset, sampling setting, budget kind): a row of four panels (block efficiency, MBSU, token rate
and accuracy as ratios to AR) against draft length or target tokens, one line per method (the shape of the tables,
see analysis.tables), error bars = 95% t confidence intervals over prompts (ratios: per-prompt value / the AR run's
value). Methods are offset a little left and right of each budget point (dodged) so that their markers and error
bars do not hide each other; the tick marks the true point. AR is a dashed horizontal line with a shaded band (its
95% CI), both in the legend. The token-rate panel shows the decode rate (prefill excluded) when every run records
it, and its title the load average the runs started at (other jobs on the machine slow the timings). Plus
acceptance by tree depth, one panel per budget point, with 95% CIs over prompts; the fraction of the
optimum at the root against the budget points (runs that record it); and for the acceptance dial, each method's
block-efficiency gain over SD against SD's measured acceptance, one point per mix. The dial's MBSU and token rate
are not drawn (its draft forward runs the target) and the panels say so.
"""

from __future__ import annotations

import math
import re
import textwrap
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
from scipy import stats as sps

from analysis.columns import SETTING, SPEED
from analysis.load import Tables
from analysis.names import KINDS, method_label, method_order, score_name, setting_title
from analysis.pairs import rank_column
from analysis.stats import compare
from analysis.tables import best_shapes, settings, token_rate_column

COLORS = {"ar": "#3a3a3a", "pld": "#e377c2", "sd": "#1f77b4", "bv": "#17becf", "specinfer": "#ff7f0e",
          "spectr": "#2ca02c", "rsd_c": "#d62728", "tv": "#8c564b", "rsd_s": "#9467bd"}
MARKERS = {"ar": "", "pld": "*", "sd": "o", "bv": "P", "specinfer": "s", "spectr": "^", "rsd_c": "D", "tv": "X",
           "rsd_s": "v"}
FALLBACK_COLORS = ("#bcbd22", "#7f7f7f", "#1b9e77", "#e6ab02", "#a6761d", "#666666", "#e7298a")
FALLBACK_MARKERS = ("h", "p", "<", ">", "d", "H", "8")
EMPTY = {"token_rate_ratio": "no ratio: no matching AR run",
         "accuracy_ratio": "no ratio: no task scores,\nno matching AR run or an AR score of 0"}
DIAL_PANEL = "acceptance dial: not drawn where\nthe draft ran (it runs the target too)"
ALPHA_STAR = ("alpha* = the largest probability that any lossless verifier accepts one of the root's drafted "
              "candidates, given the draft law and how the candidates were drawn")
XLABELS = {"fixed_length": "draft length L (tokens)", "fixed_compute": "target budget B (drafted tokens per call)"}
STYLE = {"font.size": 11, "axes.titlesize": 13, "axes.labelsize": 11, "legend.fontsize": 11, "xtick.labelsize": 10,
         "ytick.labelsize": 10, "figure.titlesize": 13, "axes.spines.top": False, "axes.spines.right": False,
         "axes.grid": True, "grid.alpha": 0.3, "lines.linewidth": 1.8, "lines.markersize": 6}
BAND = " 95% CI"  # legend label suffix of a baseline's band
DODGE = 0.5  # the methods at one point spread over this fraction of the gap between neighbouring points


def method_styles(methods: Iterable[str]) -> dict[str, dict[str, str]]:
    """Colour and marker per method: fixed for the built-ins, a fallback palette (in name order) for the others."""
    others = [m for m in method_order(methods) if m not in COLORS]
    styles = {m: {"color": COLORS[m], "marker": MARKERS[m]} for m in COLORS}
    styles.update({m: {"color": FALLBACK_COLORS[i % len(FALLBACK_COLORS)],
                       "marker": FALLBACK_MARKERS[i % len(FALLBACK_MARKERS)]} for i, m in enumerate(others)})
    return styles


def load_words(runs: pd.DataFrame) -> str:
    """Where the timings of `runs` were taken: 'timed at load 1.9-2.3 on 2 CPUs' (1-minute load average at each
    run's start, from run.json), '' when no run recorded it."""
    loads, cpus = runs["load_average"].to_numpy(float), runs["cpu_count"].to_numpy(float)
    if not np.isfinite(loads).any():
        return ""
    cpu = f" on {int(np.nanmax(cpus))} CPUs" if np.isfinite(cpus).any() else ""
    return f"timed at load {np.nanmin(loads):.1f}-{np.nanmax(loads):.1f}{cpu}"


def panels(best: pd.DataFrame, timing: str = "") -> list[tuple[str, str, str]]:
    """(column, panel title, y label) of the four panels; the token rate is the decode rate when every run has it,
    its title naming the load it was `timing` at (load_words)."""
    score = score_name(best["task"])
    rate = token_rate_column(best)
    decode = rate == "decode_token_rate_ratio"
    name = "Decode token rate" if decode else "Token rate"
    return [("block_efficiency", "Block efficiency", "tokens per target call"),
            ("mbsu", "MBSU", "memory-bound speed-up (×)"),
            (rate, f"{name}\n({timing})" if timing else name,
             "decode token rate / AR's (×, prefill excluded)" if decode else "token rate / AR token rate (×)"),
            ("accuracy_ratio", f"Accuracy ({score})", f"{score} / AR's {score} (×)")]


def offsets(methods: list[str], points: list[float]) -> dict[str, float]:
    """Horizontal offset per method so that methods at one budget point sit side by side (dodge)."""
    gap = float(np.min(np.diff(points))) if len(points) > 1 else 1.0
    step = DODGE * gap / max(len(methods), 1)
    return {m: (i - (len(methods) - 1) / 2) * step for i, m in enumerate(methods)}


def draw_baseline(ax: Axes, row: pd.Series, metric: str, style: Mapping[str, str], label: str) -> None:
    """A method without a budget (AR): a dashed horizontal line with its 95% CI band, both labelled."""
    value, ci = row[metric], row.get(f"{metric}_ci", 0.0)
    ax.axhline(value, color=style["color"], linestyle="--", linewidth=1.5, label=label)
    if np.isfinite(value) and ci > 0:
        ax.axhspan(value - ci, value + ci, color=style["color"], alpha=0.12, linewidth=0, label=label + BAND)


def draw_method(ax: Axes, rows: pd.DataFrame, metric: str, style: Mapping[str, str], label: str, dx: float) -> None:
    """One method's line over the budget points (shifted by dx), with 95% CI error bars, cut at 0 below (every
    drawn metric is a count or ratio that cannot be negative)."""
    x, y = rows["x"].to_numpy(float) + dx, rows[metric].to_numpy(float)
    ci = rows[f"{metric}_ci"].to_numpy(float)
    ax.plot(x, y, color=style["color"], marker=style["marker"], label=label)
    ax.errorbar(x, y, yerr=[np.minimum(ci, np.maximum(y, 0.0)), ci], fmt="none", ecolor=style["color"],
                elinewidth=1.2, capsize=3, alpha=0.8)


def new_figure(width: float, height: float) -> Figure:
    """A constrained-layout figure on an Agg canvas (headless, no pyplot)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def figure_legend(fig: Figure, axes: Iterable[Axes]) -> None:
    """One legend below the panels, each entry once, in drawing order, a band right after its line, in as many
    columns as fit the figure's width."""
    found: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            found.setdefault(label, handle)
    entries: dict[str, Any] = {}
    for label, handle in found.items():
        if not label.endswith(BAND):
            entries[label] = handle
            if label + BAND in found:
                entries[label + BAND] = found[label + BAND]
    renderer = fig.canvas.get_renderer()
    for ncols in range(min(len(entries), 9), 0, -1):  # the most columns that fit the figure's width
        legend = fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncols=ncols,
                            frameon=False)
        if ncols == 1 or legend.get_window_extent(renderer).width <= fig.bbox.width:
            return
        legend.remove()


def suptitle(fig: Figure, *lines: str) -> None:
    """The figure title, each line wrapped to the figure's width."""
    chars = int(fig.get_figwidth() * 72 / (0.6 * mpl.rcParams["figure.titlesize"]))
    fig.suptitle("\n".join(textwrap.fill(line, chars) for line in lines))


def set_points(ax: Axes, points: list[float], shift: Mapping[str, float]) -> None:
    """Ticks at the true budget points, limits wide enough for the dodged markers."""
    pad = max([abs(v) for v in shift.values()] + [0.0]) + (0.5 if len(points) == 1 else 0.3)
    ax.set_xticks(points)
    ax.set_xlim(min(points) - pad, max(points) + pad)


def performance_figure(best: pd.DataFrame, kind: str, title: str, styles: Mapping[str, Mapping[str, str]],
                       timing: str = "") -> Figure:
    """Four panels (BE, MBSU, token-rate ratio, accuracy ratio) against the budget points, one line per method; the
    rate panel's title says `timing` (load_words)."""
    points = sorted(float(x) for x in best.loc[best["budget"] == kind, "x"].unique())
    drafted = [m for m in method_order(best["method"]) if ((best["method"] == m) & (best["budget"] == kind)).any()]
    shift = offsets(drafted, points)
    with mpl.rc_context(STYLE):
        fig = new_figure(17, 5.0)
        axes = fig.subplots(1, 4, sharex=True)
        for ax, (metric, name, ylabel) in zip(axes, panels(best, timing)):
            for method in method_order(best["method"]):
                rows = best[best["method"] == method]
                if rows["budget"].isna().all():
                    draw_baseline(ax, rows.iloc[0], metric, styles[method], method_label(method))
                elif method in shift:
                    draw_method(ax, rows[rows["budget"] == kind].sort_values("x"), metric, styles[method],
                                method_label(method), shift[method])
            ax.set(title=name, xlabel=XLABELS[kind], ylabel=ylabel)
            set_points(ax, points, shift)
            if not np.isfinite(best[metric].to_numpy(float)).any():
                ax.text(0.5, 0.5, EMPTY.get(metric, "no data"), transform=ax.transAxes, ha="center", va="center",
                        color="0.4")
                ax.set_yticks([])
            if metric in SPEED and best["speed_omitted"].any():
                ax.text(0.5, 0.02, DIAL_PANEL, transform=ax.transAxes, ha="center", va="bottom", color="0.4",
                        fontsize=9)
        figure_legend(fig, axes)
        suptitle(fig, title, f"{KINDS[kind][0]}: one shape per method and point (as in the tables); methods offset "
                 "sideways at each point; error bars and AR band: 95% CI over prompts (cut at 0)")
    return fig


def acceptance_rates(steps: pd.DataFrame, run_dirs: list[str], depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Fraction of steps whose accepted path reached depth d = 1..depth (pooled over the runs' steps, as the
    summaries report it) and the 95% CI half-width with prompts as clusters (ratio estimator, t with k - 1 df)."""
    rows = steps[steps["run_dir"].isin(run_dirs)]
    depths = np.arange(1, depth + 1)
    groups = [g.to_numpy() for _, g in rows.groupby(["run_dir", "prompt_id"])["accepted_length"]]
    if not groups or depth == 0:
        return np.full(depth, np.nan), np.zeros(depth)
    n = np.array([len(g) for g in groups], dtype=float)  # steps per prompt
    hits = np.array([(g[:, None] >= depths[None, :]).sum(axis=0) for g in groups], dtype=float)  # prompts x depths
    rates = hits.sum(axis=0) / n.sum()
    k = len(n)
    if k < 2:
        return rates, np.zeros(depth)
    se = np.sqrt(((hits - rates[None, :] * n[:, None]) ** 2).sum(axis=0) / (k * (k - 1))) / n.mean()
    return rates, se * sps.t.ppf(0.975, k - 1)


def acceptance_figure(best: pd.DataFrame, steps: pd.DataFrame, kind: str, title: str,
                      styles: Mapping[str, Mapping[str, str]]) -> Figure:
    """Fraction of steps whose accepted path reached depth d, one panel per budget point, one line per method, with
    95% CIs over prompts; methods dodged sideways at each depth."""
    drafted = best[best["budget"] == kind]
    points = sorted(drafted["x"].unique())
    accepts = sorted((c for c in best.columns if c.startswith("accept_d")), key=lambda c: int(c[len("accept_d"):]))
    methods = method_order(drafted["method"])
    shift = offsets(methods, [1.0, 2.0])
    ncols = min(len(points), 5)
    nrows = math.ceil(len(points) / ncols)
    with mpl.rc_context(STYLE):
        fig = new_figure(max(3.4 * ncols + 0.8, 8.0), 3.2 * nrows + 1.6)
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True).ravel()
        for ax, x in zip(axes, points):
            for method in methods:
                rows = drafted[(drafted["method"] == method) & (drafted["x"] == x)]
                if rows.empty:
                    continue
                used = int(np.isfinite(rows.iloc[0][accepts].to_numpy(float)).sum())  # the tree's depth
                rates, half = acceptance_rates(steps, rows.iloc[0]["run_dirs"], used)
                d = np.arange(1, used + 1) + shift[method]
                ax.plot(d, rates, label=method_label(method), **styles[method])
                ax.errorbar(d, rates, yerr=half, fmt="none", ecolor=styles[method]["color"], elinewidth=1.1,
                            capsize=2.5, alpha=0.8)
            ax.set(title=f"{KINDS[kind][1]} = {x}", xlabel="tree depth d", ylim=(0, 1.02))
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        for ax in axes[::ncols]:
            ax.set_ylabel("steps reaching depth d (fraction)")
        for ax in axes[len(points):]:
            ax.set_visible(False)
        figure_legend(fig, axes[:len(points)])
        suptitle(fig, f"Acceptance by tree depth: {title}", f"{KINDS[kind][0]}, one shape per method and point (as in "
                 "the tables); error bars: 95% CI over prompts")
    return fig


def optimum_figure(best: pd.DataFrame, kind: str, title: str, styles: Mapping[str, Mapping[str, str]]) -> Figure:
    """Fraction of the optimum at the root (root acceptance / alpha*) against the budget points, one line per method
    that records it, with 95% CIs over prompts; a dotted line at 1 (the optimum)."""
    drafted = best[(best["budget"] == kind) & np.isfinite(best["fraction_of_optimum"].to_numpy(float))]
    points = sorted(float(x) for x in drafted["x"].unique())
    methods = method_order(drafted["method"])
    shift = offsets(methods, points)
    with mpl.rc_context(STYLE):
        fig = new_figure(8.0, 5.6)
        ax = fig.subplots()
        ax.axhline(1.0, color="0.3", linestyle=":", linewidth=1.2, label="alpha* (optimal verifier)")
        for method in methods:
            draw_method(ax, drafted[drafted["method"] == method].sort_values("x"), "fraction_of_optimum",
                        styles[method], method_label(method), shift[method])
        ax.set(xlabel=XLABELS[kind], ylabel="root acceptance / alpha* (fraction of the optimum)")
        tops = (drafted["fraction_of_optimum"] + drafted["fraction_of_optimum_ci"]).to_numpy(float)
        ax.set_ylim(0, max(1.05, 1.02 * float(np.nanmax(tops))) if np.isfinite(tops).any() else 1.05)
        set_points(ax, points, shift)
        figure_legend(fig, [ax])
        suptitle(fig, f"Fraction of the optimum at the root: {title}", f"{ALPHA_STAR}; 1 = no lossless verifier "
                 f"could accept more at the root. {KINDS[kind][0].capitalize()}, one shape per method and point "
                 "(as in the tables); error bars: 95% CI over prompts")
    return fig


def dial_x(sd_rows: pd.DataFrame) -> tuple[str, str]:
    """The dial figure's x column and what it is: SD's mean exact root acceptance (1 - TV(draft, target) averaged
    over its steps) where every SD cell records it, else SD's measured acceptance at depth 1."""
    if len(sd_rows) and np.isfinite(sd_rows["root_acceptance"].to_numpy(float)).all():
        return "root_acceptance", "mean exact root acceptance, 1 − TV(draft, target)"
    return "accept_d1", "fraction of steps accepting the first draft token"


def dial_gain(prompts: pd.DataFrame, row: pd.Series, sd: pd.Series, metric: str) -> tuple[float, float]:
    """A method's `metric` minus SD's at one mix and point: the mean paired difference over prompts and its 95% CI
    half-width (the same numbers as table_pairs.md) when both cells are one run each, so prompts pair one to one;
    else the difference of the cells' values and NaN."""
    if len(row["run_dirs"]) != 1 or len(sd["run_dirs"]) != 1:
        return float(row[metric] - sd[metric]), math.nan
    paired = compare(prompts, row["run_dirs"][0], sd["run_dirs"][0])
    return float(paired[f"{metric}_diff"]), (paired[f"{metric}_high"] - paired[f"{metric}_low"]) / 2


def dial_figure(best: pd.DataFrame, prompts: pd.DataFrame, kind: str, title: str,
                styles: Mapping[str, Mapping[str, str]]) -> Figure:
    """The acceptance dial: per budget point, each method's block-efficiency gain over SD (same mix and point)
    against SD's measured acceptance at that mix (dial_x), one marker per mix, with paired 95% CIs over prompts."""
    drafted = best[(best["budget"] == kind) & best["mix"].ne("")]
    points = sorted(drafted["x"].unique())
    metric = rank_column(drafted)
    column, words = dial_x(drafted[drafted["method"] == "sd"])
    ncols = min(len(points), 4)
    nrows = math.ceil(len(points) / ncols)
    with mpl.rc_context(STYLE):
        fig = new_figure(max(4.2 * ncols + 0.8, 8.0), 3.8 * nrows + 2.0)
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True).ravel()
        for ax, x in zip(axes, points):
            here = drafted[drafted["x"] == x]
            sd = here[here["method"] == "sd"].set_index("mix")
            ax.axhline(0.0, color=styles["sd"]["color"], linestyle="--", linewidth=1.2, label="SD (reference)")
            for method in (m for m in method_order(here["method"]) if m != "sd"):
                rows = [(sd.loc[r["mix"], column], *dial_gain(prompts, r, sd.loc[r["mix"]], metric), r["mix"])
                        for _, r in here[here["method"] == method].iterrows() if r["mix"] in sd.index]
                if not rows:
                    continue
                acc, gain, half, mixes = map(list, zip(*sorted(rows)))
                ax.plot(acc, gain, label=method_label(method), **styles[method])
                ax.errorbar(acc, gain, yerr=half, fmt="none", ecolor=styles[method]["color"], elinewidth=1.1,
                            capsize=2.5, alpha=0.8)
            for mix, acc in sd[column].items():
                ax.annotate(f"a={mix}", (acc, 0.0), textcoords="offset points", xytext=(0, -14), ha="center",
                            fontsize=8, color="0.35")
            ax.set(title=f"{KINDS[kind][1]} = {x}", xlabel=f"SD's acceptance ({words})")
        for ax in axes[::ncols]:
            ax.set_ylabel(f"{'expected ' if metric.startswith('expected') else ''}BE − SD's (tokens per call)")
        for ax in axes[len(points):]:
            ax.set_visible(False)
        figure_legend(fig, axes[:len(points)])
        suptitle(fig, f"Acceptance dial: block-efficiency gain over SD against SD's acceptance: {title}",
                 f"One marker per mix a (draft logits (1 − a)·draft + a·target, labelled under the SD line); x: "
                 f"SD's {words} at that mix and point; y: each method's "
                 f"{'expected ' if metric.startswith('expected') else 'measured '}block efficiency minus SD's. "
                 f"{KINDS[kind][0].capitalize()}, one shape per method and point (as in the tables); error bars: "
                 "paired 95% CI "
                 "over prompts")
    return fig


def slug(setting: Mapping[str, Any], kind: str, with_prompts: bool = False) -> str:
    """A file-name stem for a (setting, budget kind); `with_prompts` adds the prompt set (where one dataset has
    several)."""
    dtype = "" if setting.get("dtype", "float32") == "float32" else f"_{setting['dtype']}"
    prompts = f"_{setting['prompt_set'].split()[0]}p-{setting['prompt_set'][-6:]}" if with_prompts else ""
    mix = f"_mix{setting['mix']}" if setting.get("mix") else ""
    name = (f"{setting['model_pair']}{mix}{dtype}_{setting['dataset']}{prompts}_T{setting['temperature']:g}"
            f"-k{setting['top_k']}-p{setting['top_p']:g}-n{setting['max_new_tokens']}_{kind}")
    return re.sub(r"[^\w.-]+", "-", name)


def figures(tables: Tables) -> Iterator[tuple[str, Figure]]:
    """(file stem, figure) for every setting and budget kind: the four-panel figure, acceptance by depth and (where
    recorded) the fraction of the optimum; then, per setting without the mix, the acceptance dial's figure."""
    best = best_shapes(tables.runs, tables.prompts)
    styles = method_styles(tables.runs["method"])
    several = best.groupby([k for k in SETTING if k != "prompt_set"], sort=False)["prompt_set"].nunique().max() > 1
    for setting, group in settings(best):
        for kind in (k for k in KINDS if (group["budget"] == k).any()):
            title, stem = setting_title(setting), slug(setting, kind, several)
            timed = tables.runs[tables.runs["run_dir"].isin([d for ds in group["run_dirs"] for d in ds])]
            yield stem, performance_figure(group, kind, title, styles, load_words(timed))
            yield f"{stem}_acceptance", acceptance_figure(group, tables.steps, kind, title, styles)
            if np.isfinite(group.loc[group["budget"] == kind, "fraction_of_optimum"].to_numpy(float)).any():
                yield f"{stem}_optimum", optimum_figure(group, kind, title, styles)
    dial = best[best["mix"].ne("")].assign(setting_mix=best["mix"], mix="")
    for setting, group in settings(dial):
        group = group.assign(mix=group.pop("setting_mix"))
        for kind in (k for k in KINDS if ((group["budget"] == k) & (group["method"] == "sd")).any()):
            yield (f"{slug(setting, kind, several)}_dial",
                   dial_figure(group, tables.prompts, kind, setting_title(setting), styles))


def save(fig: Figure, stem: Path, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Write `stem`.png (150 dpi) and `stem`.pdf (or the given formats); returns the paths."""
    paths = [stem.parent / f"{stem.name}.{ext}" for ext in formats]
    for path in paths:
        fig.savefig(path, dpi=150)
    return paths
