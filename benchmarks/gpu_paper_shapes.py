"""The paper's model shapes on a GPU, without downloading anything: random-weight models built from the exact
architectures of Llama-2-7B with a 68M Llama draft (JackFram/llama-68m) and OPT-13B with OPT-125M, in bfloat16.

First the target's forward time against the number of tokens verified (q = 1..32 after the prompt's context); then
per method and tree shape: the token rate and the engine's own split of a step into draft / target / other time (no
extra device syncs), the host syncs per step (outside and inside the models' forwards), and, from a second,
profiled pass, the finer split into forwards, drafting logic, verification, compaction and other. Random weights make
block efficiency meaningless (the draft is unrelated to the target): the timings are what this measures. For the
shapes in --static-shapes the same generation runs again through static-shape forwards (`--static compile`:
torch.compile, which on CUDA also captures CUDA graphs; `buffers`: the fixed shapes uncompiled, for the CPU smoke
run): the `static` column is its token rate over eager's, its warm-up (every compile) is timed apart.
`benchmarks/gpu_check.sh` runs the whole check (both pairs; AR and every method at L = 4, B = 14 and B = 30) in
under 8 minutes on one H200-class GPU and writes a JSON.

    python benchmarks/gpu_paper_shapes.py                  # CUDA, bfloat16, full size
    python benchmarks/gpu_paper_shapes.py --scale-down     # CPU, fp32, same families scaled down (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from common import COMPONENTS, SHAPES, command, machine
from paper_shapes_measure import build, check_forward, forward_scaling, measure, measure_static

from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams
from rsd.drafters import RSDC, RSDS, SD, SpecInfer, SpecTr

PAIRS = {"llama-2-7b + llama-68m": ("llama-2-7b", "llama-68m"), "opt-13b + opt-125m": ("opt-13b", "opt-125m")}
QUICK_SHAPES = ("ar", "sd L=4", "spectr 3x4", "rsd_s 3x4", "rsd_s 6x5")
# One shape per method at the paper's target budget B = 14 drafted tokens (K = W = b_1 = 2, L = 7), next to
# common.SHAPES' L = 4 and B = 30 shapes.
BUDGET_14 = {
    "sd L=14 (B=14)": lambda: SD(14),
    "specinfer 2x7": lambda: SpecInfer(2, 7),
    "spectr 2x7": lambda: SpecTr(2, 7),
    "rsd_c 2-1-1-1-1-1-1": lambda: RSDC([2, 1, 1, 1, 1, 1, 1]),
    "rsd_s 2x7": lambda: RSDS(2, 7),
}
ALL_SHAPES = {**SHAPES, **BUDGET_14}
# AR, then every method at L = 4, at B = 14 and at B = 30 (the order they run in, so a deadline cuts B = 30 first).
CHECK_SHAPES = (*list(SHAPES)[:6], *BUDGET_14, *list(SHAPES)[6:])


def write_report(path: Path, report: dict) -> None:
    """Replace `path` atomically: a crash mid-run leaves the last complete report."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1))
    os.replace(tmp, path)


MAIN_COLUMNS = (("B", "B", "d"), ("tokens_per_step", "tok/step", ".2f"), ("rate", "tok/s", ".1f"),
                ("draft_ms", "draft", ".2f"), ("target_ms", "target", ".2f"), ("other_ms", "other", ".2f"),
                ("step_ms", "step", ".2f"), ("syncs_engine", "syncs", ".1f"), ("syncs_forward", "fwd syncs", ".1f"))


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale-down", action="store_true", help="CPU, fp32, width and depth / 32 (a smoke run)")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"),
                    help="dtype of the full-size GPU run")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--sync-tokens", type=int, default=8,
                    help="new tokens beyond the shape's depth in the generation counting host syncs")
    ap.add_argument("--forward-sizes", default="1,2,4,8,16,32", help="tokens verified per timed target forward")
    ap.add_argument("--shapes", default="all",
                    help="comma-separated labels (common.SHAPES and BUDGET_14), 'quick', 'check' or 'all'")
    ap.add_argument("--pairs", default="all", help="comma-separated pair names, or 'all'")
    ap.add_argument("--time-budget-s", type=float, default=0.0,
                    help="seconds for the whole run, shared equally by the pairs; shapes past a pair's share are "
                    "skipped and listed (0: no limit)")
    ap.add_argument("--static", default="compile", choices=("off", "buffers", "compile"),
                    help="static-shape forwards to compare eager against (model_pair.static_forward's values)")
    ap.add_argument("--static-shapes", default="ar,sd L=4",
                    help="comma-separated labels measured again through --static (each compiles its shapes)")
    ap.add_argument("--static-budget-s", type=float, default=0.0,
                    help="seconds per pair for the static passes; a shape past it is skipped (0: no limit)")
    ap.add_argument("--json", type=Path, help="write the report here (rewritten after every shape)")
    args = ap.parse_args(argv)
    labels = {"all": list(SHAPES), "quick": list(QUICK_SHAPES), "check": list(CHECK_SHAPES)}.get(args.shapes) \
        or args.shapes.split(",")
    pairs = list(PAIRS) if args.pairs == "all" else args.pairs.split(",")
    args.static_labels = [] if args.static == "off" else [x for x in args.static_shapes.split(",") if x]
    unknown = [x for x in labels + args.static_labels if x not in ALL_SHAPES] + [x for x in pairs if x not in PAIRS]
    if unknown:
        raise SystemExit(f"gpu_paper_shapes: unknown shape or pair {unknown}; shapes: {list(ALL_SHAPES)}, "
                         f"pairs: {list(PAIRS)}")
    if args.sync_tokens < 1:
        raise SystemExit(f"gpu_paper_shapes: --sync-tokens={args.sync_tokens}; give at least 1 (a full-depth step)")
    if args.scale_down:
        device, dtype, scale = torch.device("cpu"), torch.float32, 32
    else:
        if not torch.cuda.is_available():
            raise SystemExit("gpu_paper_shapes: no CUDA device here; this measures a GPU (for the CPU smoke run use "
                             "--scale-down, or benchmarks/gpu_check.sh --cpu-smoke)")
        device, dtype, scale = torch.device("cuda"), getattr(torch, args.dtype), 1
    check_forward(dtype)
    begin = time.monotonic()
    print(f"$ {command()}\n# {machine()}")
    print(f"# random weights, {dtype}, {args.prompts} prompts of {args.prompt_tokens} tokens x {args.max_new_tokens} "
          f"new, T=1; ms per step; eager forwards; static = token rate through static-shape forwards "
          f"({args.static}) / eager's{'; SCALED DOWN /32' if scale > 1 else ''}")
    report = {"command": command(), "machine": machine(), "dtype": str(dtype), "scale_down": scale,
              "static_path": args.static, "args": {k: str(v) for k, v in vars(args).items()}, "pairs": []}
    rows = []
    for p, pair_name in enumerate(pairs):
        deadline = begin + args.time_budget_s * (p + 1) / len(pairs) if args.time_budget_s else float("inf")
        entry = {"pair": pair_name, "rows": [], "skipped": [], "static_skipped": []}
        report["pairs"].append(entry)
        run_pair(entry, labels, args, (device, dtype, scale), deadline, report)
        rows += entry["rows"]
    print(f"\n# {time.monotonic() - begin:.0f} s in all")
    return rows


def run_pair(entry: dict, labels: list[str], args: argparse.Namespace, where: tuple, deadline: float,
             report: dict) -> None:
    """Build one pair, time its target forward against q, then measure each shape until `deadline`, filling
    `entry` (part of `report`, rewritten to --json after every shape) and printing the tables."""
    device, dtype, scale = where
    target_name, draft_name = PAIRS[entry["pair"]]
    target, draft = build(target_name, device, dtype, scale), build(draft_name, device, dtype, scale)
    vocab = target.model.config.vocab_size
    gen0 = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (args.prompt_tokens,), generator=gen0).tolist() for _ in range(args.prompts)]
    sizes = [int(n) for n in args.forward_sizes.split(",")]
    entry.update(target_params=target.num_params, draft_params=draft.num_params,
                 target_forward_ms=forward_scaling(target, args.prompt_tokens, sizes, reps=5))
    print(f"\n## {entry['pair']}: target {target.num_params / 1e6:.0f}M, draft {draft.num_params / 1e6:.1f}M params")
    print("target forward ms vs tokens scored: "
          + ", ".join(f"{n}: {ms:.2f}" for n, ms in entry["target_forward_ms"].items()))
    head = f"{'method':<20} " + " ".join(f"{title:>9}" for _, title, _ in MAIN_COLUMNS) + f" {'static':>9}"
    print(head + "\n" + "-" * len(head))
    static_start = None
    for label in labels:
        if time.monotonic() > deadline:
            entry["skipped"].append(label)
            continue
        drafter = ALL_SHAPES[label]()
        engine = Engine(target, draft if drafter.draft_length else None, drafter, SamplingParams(1.0), [], vocab)
        row = {"pair": entry["pair"], "method": label, "B": drafter.max_tree_size,
               **measure(engine, prompts, args.max_new_tokens, args.sync_tokens), "static": "-"}
        if label in args.static_labels:
            static_start = time.monotonic() if static_start is None else static_start
            if args.static_budget_s and time.monotonic() - static_start > args.static_budget_s:
                entry["static_skipped"].append(label)
            else:
                row.update(measure_static(engine, args.static, prompts, args.max_new_tokens, row["rate"]))
        entry["rows"].append(row)
        if args.json:
            write_report(args.json, report)
        print(f"{label:<20} " + " ".join(f"{row[key]:>9{fmt}}" for key, _, fmt in MAIN_COLUMNS)
              + f" {row['static']:>9}", flush=True)
    if entry["skipped"]:
        print(f"skipped past this pair's share of --time-budget-s: {', '.join(entry['skipped'])}")
    if entry["static_skipped"]:
        print(f"static pass skipped past --static-budget-s: {', '.join(entry['static_skipped'])}")
    print_static(entry["rows"])
    print_components(entry["rows"])
    if device.type == "cuda":
        entry["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        print(f"peak GPU memory {entry['peak_gpu_memory_gib']:.1f} GiB")
        torch.cuda.reset_peak_memory_stats()
    if args.json:
        write_report(args.json, report)


def print_static(rows: list[dict]) -> None:
    """The static passes: token rate and ms per step next to eager's, the warm-up (compiles), CUDA-graph skips."""
    done = [r for r in rows if r["static"] != "-"]
    if not done:
        return
    print(f"\nstatic-shape forwards vs eager\n{'method':<20} {'eager/s':>8} {'static/s':>8} {'x eager':>8} "
          f"{'eager ms':>9} {'static ms':>9} {'warm-up s':>9} {'graph skips':>11}")
    for r in done:
        if r["static"] == "failed":
            print(f"{r['method']:<20} failed: {r['static_error']}")
            continue
        print(f"{r['method']:<20} {r['rate']:>8.1f} {r['static_rate']:>8.1f} {r['static']:>8} {r['step_ms']:>9.2f} "
              f"{r['static_step_ms']:>9.2f} {r['static_warm_up_s']:>9.1f} {r['cudagraph_skips']:>11}")


def print_components(rows: list[dict]) -> None:
    """The profiled pass's split: ms per step of each component and the share of the step outside the forwards."""
    head = f"{'method':<20} " + " ".join(f"{c:>10}" for c in COMPONENTS) + f" {'step':>8} {'outside':>8}"
    print("\nprofiled split (a sync around every component)\n" + head + "\n" + "-" * len(head))
    for row in rows:
        print(f"{row['method']:<20} " + " ".join(f"{row[c]:>10.3f}" for c in COMPONENTS)
              + f" {sum(row[c] for c in COMPONENTS):>8.3f} {100 * row['outside']:>7.1f}%")


if __name__ == "__main__":
    main()
