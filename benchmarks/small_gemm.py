"""What a few-row matrix product costs against one row: the kernel behind a verification forward's price.

`F.linear` of M = 1..8 rows against (a) 40 weights of 1,536 x 576 (140 MB, out of cache, like the embedded target's
MLP layers) and (b) the embedded target's 49,152 x 576 output head, float32, one thread; median of 15 calls. On a
machine where verification is nearly free (memory-bound), every M costs about what M = 1 costs.

    python benchmarks/small_gemm.py
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from common import command, machine
from forward_cost import median_s

ROWS = (1, 2, 3, 4, 5, 6, 8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers = [torch.randn(1536, 576) for _ in range(40)]
    head = torch.randn(49152, 576)
    print(f"$ {command()}\n# {machine()}\n# F.linear, float32, ms per call (median of {args.reps})")
    print(f"{'rows':>4} {'40 x 1536x576':>14} {'x 1 row':>8} {'49152x576':>10} {'x 1 row':>8}")
    first: list[float] = []
    for m in ROWS:
        x = torch.randn(m, 576)
        times = [median_s(lambda x=x: [F.linear(x, w) for w in layers], args.reps),
                 median_s(lambda x=x: F.linear(x, head), args.reps)]
        first = first or times
        print(f"{m:>4} {1e3 * times[0]:>14.1f} {times[0] / first[0]:>8.2f} {1e3 * times[1]:>10.1f} "
              f"{times[1] / first[1]:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
