"""Build the embedded draft model by distillation from SmolLM2-135M-Instruct.

Stages (each resumable; outputs land in --work, default ~/.cache/rsd/draft-work):

  questions  the target writes user questions itself (self-instruct), seeded by opening words
  teacher    the target answers instruction prompts at temperature 1 (questions, news-article requests, then
             one-sentence summaries of its own articles, then German->English translations); every answer token
             is stored with the target's top-k log-probabilities, so distillation epochs cost only draft compute
  train      a small Llama (same tokenizer, embedding initialised by PCA of the target's) minimises the
             cross-entropy to the cached teacher distribution on answer tokens
  eval       mean per-token acceptance sum_x min(p, q) at temperature 1 and greedy agreement on fresh target
             answers to the built-in prompt sets (never used for training)

The default draft, v3 (rsd/assets/smollm2-draft-v3), is v2 trained one more epoch on the teacher data v2 plus rounds
19-27, whose answers were stored with their top-32 teacher laws at sampling time (293k of the 917k answer tokens;
the others keep their sampled tokens as targets), with the loss KL + TV at lr 1e-3: 30 minutes of one core, after
~80 minutes of one core for the 9 new rounds:

    python experiments/train_draft.py rounds --first-round 19 --rounds 28 --batch 96 --threads 1 --dtype bfloat16 \
        --work ~/.cache/rsd/draft-work-v2
    python experiments/train_draft.py export --work ~/.cache/rsd/draft-work-v2
    python experiments/train_draft.py train --threads 1 --work ~/.cache/rsd/draft-work-v2 \
        --init-from rsd/assets/smollm2-draft-v2 --epochs 1 --lr 1e-3 --loss kl+tv --out rsd/assets/smollm2-draft-v3
    python experiments/compare_drafts.py rsd/assets/smollm2-draft-v2 rsd/assets/smollm2-draft-v3

(from the committed token ids alone, `rescore` rebuilds rounds 19-27's teacher laws, up to bfloat16 rounding). v2
(rsd/assets/smollm2-draft-v2, model_pair=smollm2_v2: 4 layers of width 256, a head over the 16,384 most frequent
answer tokens, 7.34M parameters) was built from rounds 0-18 (618k on-policy answer tokens in three styles) by one
command, 4 epochs in 92 minutes of one core (single-thread training, no teacher forward: the sampled tokens are the
targets):

    python experiments/train_draft.py train --threads 1 --work ~/.cache/rsd/draft-work-v2 \
        --out rsd/assets/smollm2-draft-v2
    python experiments/train_draft.py eval --out rsd/assets/smollm2-draft-v2 --eval-prompts 8 --eval-max-new 64

(defaults: --data rounds --width 256 --layers 4 --head-vocab 16384 --epochs 4 --lr 3e-3 --loss kl). Rounds whose
top-k laws exist (sampled with them, or rebuilt by `rescore`, a target forward per token) are used with those laws
instead of the sampled tokens.

The first draft, v1 (rsd/assets/smollm2-draft, model_pair=smollm2_v1), was built by exactly what `all` runs with
`--data teacher --width 128 --head-vocab 0 --epochs 6` (about 3.5 hours on 2 CPU cores, most of it `teacher`):

    python experiments/train_draft.py questions --threads 1
    python experiments/train_draft.py teacher --threads 1
    python experiments/train_draft.py train --data teacher --width 128 --head-vocab 0 --epochs 6 \
        --out rsd/assets/smollm2-draft
    python experiments/train_draft.py train --data teacher --epochs 6 --lr 1.5e-3 \
        --init-from rsd/assets/smollm2-draft --out rsd/assets/smollm2-draft
    python experiments/train_draft.py eval --out rsd/assets/smollm2-draft

The teacher data v2 was made in self-contained rounds, 96 questions, articles, summaries and translations each, by
the target in bfloat16 at one thread (about 110 teacher tokens/s, 31k tokens a round, ~5 min):

    python experiments/train_draft.py rounds --rounds 400 --batch 96 --threads 1 --dtype bfloat16 \
        --work ~/.cache/rsd/draft-work-v2                       # resumable: finished rounds are skipped
    python experiments/train_draft.py export --work ~/.cache/rsd/draft-work-v2   # token ids -> experiments/teacher_v2
    python experiments/train_draft.py rescore --dtype bfloat16 --batch 16 --work ~/.cache/rsd/draft-work-v2
                                          # optional: the top-k teacher laws, a target forward per token

The built-in evaluation prompts (rsd/data/builtin) are held out: training prompts are generated, not taken from them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from draft_training.distill import stage_train
from draft_training.evaluate import stage_eval
from draft_training.rounds import stage_export, stage_rescore
from draft_training.teacher import stage_questions, stage_rounds, stage_teacher

from rsd.models.embedded import cache_root

DRAFT_DIR = Path(__file__).resolve().parent.parent / "rsd" / "assets" / "smollm2-draft-v3"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["questions", "teacher", "rounds", "export", "rescore", "train", "eval", "all"])
    ap.add_argument("--tokens-dir", type=Path, default=Path(__file__).resolve().parent / "teacher_v2",
                    help="where `export` writes and `rescore` reads the rounds' token ids")
    ap.add_argument("--rounds", type=int, default=400, help="rounds of on-policy teacher data (stage rounds)")
    ap.add_argument("--first-round", type=int, default=0, help="index of the first round `rounds` makes")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="the target's dtype while it writes teacher data")
    ap.add_argument("--work", type=Path, default=cache_root() / "draft-work")
    ap.add_argument("--data", choices=["rounds", "teacher"], default="rounds",
                    help="train on the v2 rounds (rounds/round-*.pt) or the v1 teacher shards (teacher-*.pt)")
    ap.add_argument("--out", type=Path, default=DRAFT_DIR, help="where `train` saves and `eval` reads the draft")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--questions", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--head-vocab", type=int, default=16384,
                    help="tokens the draft's output head covers (the most frequent answer tokens; 0: all)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--loss", choices=["kl", "tv", "kl+tv"], default="kl", help="the distillation loss (train)")
    ap.add_argument("--max-len", type=int, default=384)
    ap.add_argument("--tokens-per-batch", type=int, default=4096)
    ap.add_argument("--init-scale", type=float, default=0.05, help="std of the PCA-initialised embedding")
    ap.add_argument("--init-from", type=Path, help="continue training this saved draft instead of a fresh one")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-prompts", type=int, default=24)
    ap.add_argument("--eval-max-new", type=int, default=96)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage in ("questions", "all"):
        stage_questions(args.work, args.questions, args.batch)
    if args.stage in ("teacher", "all"):
        stage_teacher(args.work, args.batch)
    if args.stage == "rounds":
        stage_rounds(args.work, args.rounds, args.batch, getattr(torch, args.dtype), args.first_round)
    if args.stage == "export":
        stage_export(args.work, args.tokens_dir)
    if args.stage == "rescore":
        stage_rescore(args.work, args.tokens_dir, getattr(torch, args.dtype), args.batch)
    if args.stage == "train":
        stage_train(args, args.lr, args.init_from)
    if args.stage == "all":  # the two passes the v1 draft went through (v1: --data teacher --head-vocab 0)
        stage_train(args, args.lr)
        stage_train(args, args.lr / 2, init_from=args.out)
    if args.stage in ("eval", "all"):
        stage_eval(args.out, args.eval_prompts, args.eval_max_new)


if __name__ == "__main__":
    main()
