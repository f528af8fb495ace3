"""Paired acceptance of two drafts on the same target answers to the held-out built-in prompts.

    python experiments/compare_drafts.py rsd/assets/smollm2-draft-v2 ~/.cache/rsd/draft-v3 --prompts 24 --max-new 96

The target (float32, one thread) answers each prompt once at temperature 1; every answer token's acceptance
sum_x min(p, q) is computed for both drafts, so the difference is paired token by token. Prints per set and pooled:
each draft's mean acceptance and the difference with its standard error (over prompts, the independent unit).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from draft_training.evaluate import answer_acceptance
from draft_training.teacher import load_target


@torch.inference_mode()
def main() -> None:
    from transformers import AutoModelForCausalLM

    import rsd.models.trimmed  # noqa: F401  (registers the trimmed-head model class)
    from rsd.data import load_builtin

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("drafts", nargs=2, type=Path)
    ap.add_argument("--prompts", type=int, default=24, help="prompts per built-in set")
    ap.add_argument("--max-new", type=int, default=96)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok, target = load_target()
    drafts = [AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval() for d in args.drafts]
    torch.manual_seed(0)
    pooled: list[tuple[float, float, int]] = []
    for name in ("xsum_builtin", "wmt_builtin", "dolly_builtin"):
        rows = [(acc[0], acc[1], n) for acc, _, n, _ in
                answer_acceptance(tok, target, drafts, load_builtin(name)[:args.prompts], args.max_new)]
        pooled += rows
        report(name, rows)
    report("all", pooled)


def report(name: str, rows: list[tuple[float, float, int]]) -> None:
    """Token-weighted mean acceptance of each draft and the paired difference (ratio estimator, SE over prompts)."""
    n = sum(t for _, _, t in rows)
    a, b = sum(r[0] for r in rows) / n, sum(r[1] for r in rows) / n
    d = b - a
    resid = [(rb - ra) - d * t for ra, rb, t in rows]  # linearised ratio-estimator residuals per prompt
    se = math.sqrt(sum(x * x for x in resid) / (len(rows) * (len(rows) - 1))) * len(rows) / n
    print(f"{name:14s} {len(rows):3d} prompts {n:5d} tokens  first {a:.3f}  second {b:.3f}  "
          f"second - first {d:+.3f} ± {1.96 * se:.3f} (95% CI)", flush=True)


if __name__ == "__main__":
    main()
