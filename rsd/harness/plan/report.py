"""The printed pre-flight plan of a sweep, and its command line, before anything loads or is queued:

    python -m rsd.harness.plan OVERRIDES          (the same overrides as `python run.py -m OVERRIDES`)
    python run.py OVERRIDES --plan

Prints the runs the sweep will execute (per method and budget), the models and datasets it needs and whether each is
available here (embedded, local path, cache; offline means a hub download is impossible), parameter counts (from the
cached config.json, else the paper-model table in conf/paper_models.yaml), each pair's memory in its dtype (weights
+ KV cache at the longest prompt + max_new_tokens + tree, + prefill logits) against the GPUs requested
(`hydra.launcher.gpus_per_node`) or visible, and the number of tokens to generate. Exits 1, listing every problem
with its fix, when something is missing or a pair cannot fit; the sweep's pre-flight callback
(rsd.harness.preflight) runs the same checks before Hydra launches any job.
"""

from __future__ import annotations

import sys

from rsd.errors import RsdError
from rsd.harness.plan.build import SweepPlan, build_plan


def format_params(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def format_plan(plan: SweepPlan) -> str:
    """The printed plan (see the module docstring)."""
    total = sum(plan.runs.values())
    lines = [f"plan for: {' '.join(plan.overrides) or '(defaults)'}",
             f"{plan.jobs} jobs -> {total} runs (distinct result directories; AR is shared by every budget)"]
    budgets = sorted({b for _, b in plan.runs}, key=lambda b: (b == "-", len(b), b))
    methods = sorted({m for m, _ in plan.runs})
    if methods:
        lines.append("runs per method and budget:")
        lines.append("  " + f"{'method':<10}" + "".join(f"{b:>7}" for b in budgets) + f"{'total':>7}")
        for m in methods:
            row = [plan.runs.get((m, b), 0) for b in budgets]
            lines.append("  " + f"{m:<10}" + "".join(f"{n or '':>7}" for n in row) + f"{sum(row):>7}")
    lines.append("models:")
    for spec, info in plan.models.items():
        status = "available" if info.available else "MISSING"
        lines.append(f"  {status:<9} {spec:<34} {format_params(info.params):>8} params ({info.facts_from})  "
                     f"{info.where}")
    lines.append("datasets:")
    for key, (ok, how) in plan.datasets.items():
        lines.append(f"  {'available' if ok else 'MISSING':<9} {key}: {how.splitlines()[0]}")
    gpus = ("not set by the launcher" if plan.gpus_requested is None else str(plan.gpus_requested))
    lines.append(f"memory per pair (weights + KV cache + prefill logits) vs devices; GPUs per job requested: {gpus}, "
                 f"visible here: {plan.gpus_visible}:")
    for e in plan.pairs:
        lines.append(f"  {'fits' if e.fits else 'NO FIT':<9} {e.name:<16} {e.dtype:<8} weights {e.weights:7.1f} GB "
                     f"+ KV {e.kv:5.2f} GB ({e.tokens} tokens) + logits {e.logits:4.2f} GB = {e.need:7.1f} GB vs "
                     f"{e.capacity:.1f} GB usable on {e.devices}")
    tokens = f"{plan.new_tokens:,}" + (" + runs over whole datasets (num_prompts=null)" if plan.unknown_prompts else "")
    lines.append(f"token budget: at most {tokens} new tokens (runs x num_prompts x max_new_tokens; with "
                 "budget.select, every shape on its tuning prompts and the best on the evaluation prompts)")
    if plan.job_errors:
        lines.append(f"{len(plan.job_errors)} job(s) will fail on their config (the other jobs still run):")
        lines += [f"  - {e}" for e in plan.job_errors]
    if plan.problems:
        lines.append(f"REFUSED: {len(plan.problems)} problem(s); nothing was launched:")
        lines += [f"  - {p}" for p in plan.problems]
    else:
        lines.append("OK: everything needed is available and every pair fits")  # (invalid jobs aside)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the plan of `run.py -m ARGV`; 0 when every job may start, 1 when it is refused or a job's config is
    invalid, 2 for a bad command line."""
    try:
        plan = build_plan(list(sys.argv[1:] if argv is None else argv))
    except RsdError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_plan(plan))
    return 1 if plan.problems or plan.job_errors else 0
