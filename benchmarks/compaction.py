"""KV-cache compaction cost against context length: the old full-cache gather (index_select of every entry) vs
move-and-crop (only the accepted path's entries move), on the embedded target's cache shape by default.

    python benchmarks/compaction.py --layers 30 --kv-heads 3 --head-dim 64
"""

from __future__ import annotations

import argparse
import time

import torch
from common import command, machine

from rsd.models.adapter import BufferLayer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--tree", type=int, default=30, help="tree tokens appended before compaction")
    ap.add_argument("--path", type=int, default=4, help="accepted path length")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"$ {command()}\n# {machine()}\n# {args.layers} layers x {args.kv_heads} kv heads x {args.head_dim}, fp32, "
          f"tree {args.tree}, path {args.path}; ms per compaction (all layers, keys and values)")
    print(f"{'context':>8} {'gather':>9} {'move+crop':>10}")
    for context in (128, 256, 512, 1024, 2048, 4096):
        total = context + args.tree
        kv = torch.randn(1, args.kv_heads, total, args.head_dim)
        path = context + torch.arange(1, 2 * args.path, 2)[: args.path]
        keep = torch.cat([torch.arange(context), path])
        layers = []
        for _ in range(args.layers):
            layer = BufferLayer()
            layer.update(kv, kv)
            layers.append(layer)
        best = {"gather": float("inf"), "move": float("inf")}
        for _ in range(args.reps):
            start = time.perf_counter()
            for layer in layers:
                layer.keys.index_select(2, keep), layer.values.index_select(2, keep)
            best["gather"] = min(best["gather"], time.perf_counter() - start)
            start = time.perf_counter()
            for layer in layers:
                layer.compact(context, path)
            best["move"] = min(best["move"], time.perf_counter() - start)
            for layer in layers:
                layer.length = total  # restore the appended tree (its data is irrelevant to the timing)
                layer._view()
        print(f"{context:>8} {1e3 * best['gather']:>9.3f} {1e3 * best['move']:>10.3f}", flush=True)


if __name__ == "__main__":
    main()
