"""Train the embedded target's EAGLE-style feature head (rsd/assets/smollm2-eagle).

Stages (each resumable; outputs land in --work, default ~/.cache/rsd/feature-work, outside git):

  extract  teacher-forced target forwards over the committed teacher data (experiments/teacher_v2: the target's own
           answers, the built-in prompts held out), one file set per round: the last hidden state after the final
           norm, the raw hidden states of a low, a middle and a high layer, and the target's top-32 log-probabilities
           at every position
  train    the head (rsd.models.feature_head) on the cached features; checkpoints every --save-every steps and
           resumes from the last one

The held-out check at the end of `train` is teacher-forced acceptance sum_x min(p, q) by draft position (the first,
second, ... drafted token) on 64 held-out teacher answers, q the target's top-32 law (a lower bound); the built-in
prompts are never in the teacher data. In-engine agreement with it is tests/core/test_feature_drafts.py.

The shipped head (one thread; CPU time as printed by the stages):

    python experiments/train_feature_head.py extract --threads 1 --max-rounds 6     # 400k tokens, 0.59 CPU-h
    python experiments/train_feature_head.py train --threads 1 --name main --steps 3 --ce-weight 1.0 \
        --feature-weight 0.1 --epochs 1                                             # 0.42 CPU-h
    # then the same command with --epochs 2 and --epochs 3 (each resumes the checkpoint; the cosine schedule is
    # recomputed for the longer run)                                               # 0.36 + 0.36 CPU-h
    python experiments/train_feature_head.py extract --threads 1 --max-rounds 10    # 4 more rounds, ~0.5 CPU-h
    python experiments/train_feature_head.py train --threads 1 --name main10 --init-from main --steps 3 \
        --ce-weight 1.0 --feature-weight 0.1 --epochs 1 --lr 5e-4                       # 0.68 CPU-h
    python experiments/train_feature_head.py extract --threads 1 --max-rounds 16    # 6 more rounds, 0.67 CPU-h
    python experiments/train_feature_head.py train --threads 1 --name main16 --init-from main10 --steps 3 \
        --ce-weight 1.0 --feature-weight 0.1 --epochs 1 --lr 5e-4                       # 1.12 CPU-h
    python experiments/train_feature_head.py extract --threads 1 --max-rounds 20    # 4 more rounds, 0.34 CPU-h
    python experiments/train_feature_head.py train --threads 1 --name main20 --init-from main16 --steps 3 \
        --ce-weight 1.0 --feature-weight 0.1 --epochs 1 --lr 5e-4 --out rsd/assets/smollm2-eagle   # 1.28 CPU-h

Held-out acceptance by draft position (the same 64 answers throughout) after epochs 1, 2, 3 on 6 rounds:
0.26/0.23/0.23/0.23, 0.29/0.27/0.26/0.25, 0.30/0.28/0.27/0.26; after the warm-started epoch on 10 rounds:
0.33/0.30/0.30/0.29; on 16 rounds (5,575 sequences): 0.35/0.33/0.32/0.32; on 20 rounds (6,984 sequences; the
shipped head): 0.37/0.35/0.34/0.34. In all 2.1 CPU-h of extraction and 4.2 of training.

Levers measured (one epoch on the same 6 rounds, against the first epoch above):
- low/mid/high features (EAGLE-3's concatenation of hidden states 2, 15, 27; `--features layers`, the rest as above):
  0.24/0.20/0.19/0.19 (0.43 CPU-h), below the last layer's 0.26/0.23/0.23/0.23: the final-norm state the LM head
  reads is the better input for a one-layer head of this target.
- the decoder layer initialised from the target's last layer (`--init target`, fc passing the feature through), one
  epoch on 2,066 sequences drawn from 10 rounds, the rest as above: 0.14/0.12/0.12/0.11 (0.48 CPU-h; soft CE 6.7
  against ~4.0 from a random start): that layer expects the un-normed residual stream, not the final-norm state.
Not yet measured: one layer against two (--layers), the loss (--steps 1, --feature-weight), the draft vocabulary
(--trimmed 0).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from feature_head_training.features import stage_extract
from feature_head_training.train import stage_train

from rsd.models.embedded import cache_root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["extract", "train"])
    ap.add_argument("--work", type=Path, default=cache_root() / "feature-work")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="float32",
                    help="the target's dtype for the features (float32: on this CPU a bfloat16 matmul of thousands "
                         "of rows runs ~7x slower than float32; features are stored in bfloat16 either way)")
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--max-rounds", type=int, default=0, help="extract the first N teacher rounds only (0: all)")
    ap.add_argument("--name", default="main", help="the training run (its checkpoint is work/train-NAME)")
    ap.add_argument("--out", type=Path, help="where train saves the head")
    ap.add_argument("--features", choices=["last", "layers"], default="last",
                    help="last: the final normed hidden state (EAGLE-1); layers: low/mid/high concatenated (EAGLE-3)")
    ap.add_argument("--layers", type=int, default=1, help="decoder layers in the head")
    ap.add_argument("--steps", type=int, default=3, help="unrolled draft steps in the loss (1: no training-time test)")
    ap.add_argument("--steps-eval", type=int, default=4)
    ap.add_argument("--feature-weight", type=float, default=1.0, help="SmoothL1 feature loss weight (0: none)")
    ap.add_argument("--ce-weight", type=float, default=0.1, help="soft CE weight when the feature loss is on")
    ap.add_argument("--trimmed", type=int, default=1, help="1: the draft v3 head's 16,384 tokens; 0: all")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--init", choices=["random", "target"], default="random",
                    help="the decoder layers' start: random, or a copy of the target's last layer")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--pack-tokens", type=int, default=1024)
    ap.add_argument("--max-sequences", type=int, default=0, help="train on at most this many sequences (0: all)")
    ap.add_argument("--held-out", type=int, default=64)
    ap.add_argument("--held-out-rounds", type=int, default=6, help="draw the held-out answers from these first rounds")
    ap.add_argument("--init-from", help="start from the head of training run NAME (work/train-NAME), new optimizer")
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--bf16", type=int, default=0, help="bfloat16 autocast in training")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage == "extract":
        stage_extract(args.work, getattr(torch, args.dtype), args.batch_tokens, args.max_rounds)
    if args.stage == "train":
        stage_train(args)
    (args.work / f"{args.stage}.done.json").write_text(json.dumps({"stage": args.stage}) + "\n")


if __name__ == "__main__":
    main()
