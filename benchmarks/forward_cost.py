"""What one forward costs against this machine's limits, in float32 and bfloat16 (the regime choice of `dtype: auto`).

For each model of the pair and each dtype: the median time of one cached forward of q = 1..31 tokens after a
256-token context, next to the time its weights' bytes take at the measured memory bandwidth (a large copy) and its
FLOPs at the measured matmul rate of that dtype. dtypes run interleaved q by q, so machine load hits both alike.

    python benchmarks/forward_cost.py --pair embedded
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from common import PAIRS, command, machine

from rsd.harness.schema import ModelPairConfig
from rsd.models.adapter import CausalLM
from rsd.models.pairs import load_pair

QS = (1, 2, 3, 4, 5, 6, 8, 13, 16, 31)  # 2..6: what a chain or a small tree verifies at L = 1..5


def median_s(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[reps // 2]


def bandwidth_bytes_per_s() -> float:
    """Read + write bytes per second of a 256 MB copy (one thread)."""
    src = torch.empty(64 * 2**20, dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / median_s(lambda: dst.copy_(src), 7)


def matmul_flops_per_s(dtype: torch.dtype, n: int = 1024) -> float:
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    return 2 * n**3 / median_s(lambda: a @ b, 5)


def forward_s(lm: CausalLM, q: int, context: int = 256, reps: int = 9) -> float:
    lm.reset()
    lm.forward(torch.arange(context) % 200 + 10, torch.arange(context), None, last=1)
    attend = torch.ones(q, context + q, dtype=torch.bool)

    def one():
        lm.forward(torch.full((q,), 11), torch.full((q,), context), attend)
        lm.compact(context, torch.zeros(0, dtype=torch.long))

    return median_s(one, reps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", choices=sorted(PAIRS), default="embedded")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--qs", default=",".join(map(str, QS)), help="tokens per forward, comma-separated")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtypes = args.dtypes.split(",")
    qs = [int(q) for q in args.qs.split(",")]
    pair = load_pair(ModelPairConfig.from_dict({**PAIRS[args.pair], "dtype": "float32", "device": "cpu"}))
    bw = bandwidth_bytes_per_s()
    rate = {d: matmul_flops_per_s(getattr(torch, d)) for d in dtypes}
    print(f"$ {command()}\n# {machine()}\n# copy bandwidth {bw / 1e9:.1f} GB/s (read + write); matmul "
          + ", ".join(f"{d} {rate[d] / 1e9:.0f} GFLOP/s" for d in dtypes))
    for role in ("target", "draft"):
        lms = {d: CausalLM(copy.deepcopy(getattr(pair, role).model).to(getattr(torch, d))) for d in dtypes}
        params = lms[dtypes[0]].num_params
        head = (f"\n{role} ({params / 1e6:.1f}M params) {'q':>3} "
                + " ".join(f"{d + ' ms':>14} {'x q=1':>6} {'x bytes':>7} {'x flops':>7}" for d in dtypes))
        print(head + "\n" + "-" * len(head))
        first: dict[str, float] = {}
        for q in qs:
            cells = []
            for d in dtypes:
                t = forward_s(lms[d], q)
                first.setdefault(d, t)
                nbytes = params * torch.finfo(getattr(torch, d)).bits // 8
                cells.append(f"{1e3 * t:>14.2f} {t / first[d]:>6.2f} {t / (nbytes / bw):>7.1f} "
                             f"{t / (2 * params * q / rate[d]):>7.1f}")
            print(f"{'':<{len(role) + 16}} {q:>3} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
