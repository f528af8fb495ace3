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
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rsd.models.embedded import cache_root, embedded_target_dir
from rsd.models.feature_head.unrolled import unrolled_outputs

TEACHER_DIR = Path(__file__).resolve().parent / "teacher_v2"
ASSET_DIR = Path(__file__).resolve().parent.parent / "rsd" / "assets" / "smollm2-eagle"
DRAFT_V3 = Path(__file__).resolve().parent.parent / "rsd" / "assets" / "smollm2-draft-v3"
TOPK = 32
LAYERS = {"low": 2, "mid": 15, "high": 27}  # hidden_states indices (0 = embeddings) for the EAGLE-3 concatenation


def round_sequences(npz: Path) -> tuple[list[np.ndarray], np.ndarray, list[str]]:
    """A round's prompt+answer token sequences, prompt lengths and styles."""
    z = np.load(npz)
    bounds = np.cumsum(np.concatenate([[0], z["prompt_len"] + z["answer_len"]]))
    seqs = [z["tokens"][bounds[i]:bounds[i + 1]].astype(np.int64) for i in range(len(z["style"]))]
    return seqs, z["prompt_len"].astype(np.int64), [str(s) for s in z["style"]]


def load_target(dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(embedded_target_dir(), dtype=dtype).eval()


@torch.inference_mode()
def extract_round(target, npz: Path, out: Path, batch_tokens: int) -> int:
    """Write one round's features to `out` (a directory renamed into place when complete); returns its tokens."""
    seqs, _, _ = round_sequences(npz)
    total = sum(len(s) for s in seqs)
    hidden = target.config.hidden_size
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    arrays = {name: np.lib.format.open_memmap(tmp / f"{name}.npy", "w+", np.uint16, (total, hidden))
              for name in ("last", *LAYERS)}
    top_idx = np.lib.format.open_memmap(tmp / "top_idx.npy", "w+", np.int32, (total, TOPK))
    top_logp = np.lib.format.open_memmap(tmp / "top_logp.npy", "w+", np.float16, (total, TOPK))
    offsets = np.cumsum([0] + [len(s) for s in seqs])
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    start = 0
    while start < len(order):
        width = len(seqs[order[start]])
        stop = start + 1
        while stop < len(order) and len(seqs[order[stop]]) * (stop - start + 1) <= batch_tokens:
            stop += 1
        group = order[start:stop]
        width = max(len(seqs[i]) for i in group)
        ids = torch.zeros((len(group), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(group):
            ids[row, :len(seqs[i])] = torch.from_numpy(seqs[i])
            mask[row, :len(seqs[i])] = 1
        out_h = target.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        last = out_h.last_hidden_state
        logp = torch.log_softmax(target.lm_head(last).float(), -1)
        v, k = logp.topk(TOPK, -1)
        for row, i in enumerate(group):
            n, a = len(seqs[i]), offsets[i]
            arrays["last"][a:a + n] = last[row, :n].to(torch.bfloat16).view(torch.uint16).numpy()
            for name, layer in LAYERS.items():
                arrays[name][a:a + n] = out_h.hidden_states[layer][row, :n].to(torch.bfloat16).view(
                    torch.uint16).numpy()
            top_idx[a:a + n] = k[row, :n].to(torch.int32).numpy()
            top_logp[a:a + n] = v[row, :n].to(torch.float16).numpy()
        start = stop
    for arr in (*arrays.values(), top_idx, top_logp):
        arr.flush()
    del arrays, top_idx, top_logp
    shutil.copy(npz, tmp / "tokens.npz")
    os.replace(tmp, out)
    return total


def stage_extract(work: Path, dtype: torch.dtype, batch_tokens: int, max_rounds: int) -> None:
    target = load_target(dtype)
    rounds = sorted(TEACHER_DIR.glob("round-*.npz"))[: max_rounds or None]
    t0, cpu0, done = time.time(), time.process_time(), 0
    for npz in rounds:
        out = work / "features" / npz.stem
        if (out / "tokens.npz").is_file():
            continue
        done += extract_round(target, npz, out, batch_tokens)
        print(f"[extract] {npz.stem}: {done} tokens, {done / (time.time() - t0):.0f} tok/s, "
              f"{(time.process_time() - cpu0) / 3600:.2f} CPU-h", flush=True)
    print(f"[extract] all {len(rounds)} rounds in {work / 'features'}", flush=True)


class FeatureData:
    """The extracted rounds as memory maps: per sequence its tokens, prompt length, style and row offset."""

    def __init__(self, work: Path, layers: tuple) -> None:
        self.rounds = []
        for d in sorted((work / "features").glob("round-*")):
            if not (d / "tokens.npz").is_file():
                continue  # a round still being extracted
            seqs, plen, styles = round_sequences(d / "tokens.npz")
            names = ["last"] if tuple(layers) == ("last",) else [n for n, i in LAYERS.items() if i in layers]
            if len(names) != len(layers):
                raise SystemExit(f"feature layers {layers}: extracted are 'last' and {LAYERS}")
            feats = [np.load(d / f"{n}.npy", mmap_mode="r") for n in names]
            self.rounds.append((d.name, seqs, plen, styles, feats, np.load(d / "last.npy", mmap_mode="r"),
                                np.load(d / "top_idx.npy", mmap_mode="r"), np.load(d / "top_logp.npy", mmap_mode="r"),
                                np.cumsum([0] + [len(s) for s in seqs])))
        self.items = [(r, i) for r, rd in enumerate(self.rounds) for i in range(len(rd[1]))]

    def get(self, key: tuple[int, int]) -> dict:
        """One sequence as tensors: ids [T], input features [T, width], true last features [T, h], top-k laws
        [T, K] (of the token after each position), and the first position whose next token is an answer token."""
        r, i = key
        _, seqs, plen, styles, feats, last, top_idx, top_logp, off = self.rounds[r]
        a, b = off[i], off[i + 1]
        bf16 = lambda x: torch.from_numpy(np.array(x)).view(torch.bfloat16).float()  # noqa: E731
        return {"ids": torch.from_numpy(seqs[i]), "feats": torch.cat([bf16(f[a:b]) for f in feats], -1),
                "last": bf16(last[a:b]), "top_idx": torch.from_numpy(np.asarray(top_idx[a:b], np.int64)),
                "top_logp": torch.from_numpy(np.asarray(top_logp[a:b], np.float32)),
                "answer_from": int(plen[i]) - 1, "style": styles[i]}


def pack(items: list[dict]) -> dict:
    """Concatenate sequences into one row: positions restart per sequence, attention is block-diagonal causal."""
    ids = torch.cat([it["ids"] for it in items])
    positions = torch.cat([torch.arange(len(it["ids"])) for it in items])
    seq = torch.cat([torch.full((len(it["ids"]),), k) for k, it in enumerate(items)])
    prev = torch.cat([torch.cat([torch.zeros(1, it["feats"].shape[1]), it["feats"][:-1]]) for it in items])
    loss_rows = torch.cat([(torch.arange(len(it["ids"])) >= it["answer_from"])
                           & (torch.arange(len(it["ids"])) < len(it["ids"]) - 1) for it in items])
    answer_from = torch.cat([torch.full((len(it["ids"]),), it["answer_from"]) for it in items])
    return {"ids": ids, "positions": positions, "seq": seq, "prev": prev, "loss_rows": loss_rows,
            "answer_from": answer_from,
            "last": torch.cat([it["last"] for it in items]), "top_idx": torch.cat([it["top_idx"] for it in items]),
            "top_logp": torch.cat([it["top_logp"] for it in items])}


def step_rows(batch: dict, s: int) -> torch.Tensor:
    """Rows where draft step s (0-based) is scored: the next token exists and the chain's root, s positions back,
    lies in the answer (the engine drafts from the last prompt token on)."""
    return batch["loss_rows"] & (batch["positions"] - s >= batch["answer_from"])


def law_targets(batch: dict, rows: torch.Tensor, head_ids: torch.Tensor | None, vocab: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's top-k law of the next token at `rows` in the head's output space (mass outside a trimmed head
    dropped, the rest renormalised): (indices [R, K] into the head's rows, probabilities [R, K])."""
    idx, logp = batch["top_idx"][rows], batch["top_logp"][rows]
    if head_ids is not None:
        to_head = torch.full((vocab,), -1, dtype=torch.long)
        to_head[head_ids] = torch.arange(len(head_ids))
        idx = to_head[idx]
        logp = logp.masked_fill(idx < 0, float("-inf"))
        idx = idx.clamp(min=0)
    return idx, torch.softmax(logp, -1).nan_to_num(0.0)


def stage_train(args: argparse.Namespace) -> None:
    """Train (or resume training) the head; checkpoint in work/train-NAME, export to --out at the end."""
    from rsd.models.feature_head.config import head_config_for
    from rsd.models.feature_head.modules import FeatureHead
    from rsd.models.feature_head.weights import init_from_target, save_head

    torch.manual_seed(args.seed)
    target = load_target(torch.float32)
    tc = target.config
    layers = ("last",) if args.features == "last" else tuple(LAYERS.values())
    head_ids = tuple(json.loads((DRAFT_V3 / "config.json").read_text())["head_token_ids"]) if args.trimmed else ()
    cfg = head_config_for(tc, layers, args.layers, head_ids)
    head = FeatureHead(cfg)
    if args.init == "target":
        init_from_target(head, target)
    embed = target.get_input_embeddings().weight.detach()
    lm = target.get_output_embeddings().weight.detach()
    hid = torch.tensor(head_ids) if head_ids else None
    lm_rows = lm[hid] if hid is not None else lm
    if args.init_from:
        head.load_state_dict(torch.load(args.work / f"train-{args.init_from}" / "checkpoint.pt",
                                        weights_only=False)["head"])
    data = FeatureData(args.work, layers)
    # The held-out answers are drawn from the first --held-out-rounds rounds only, so extracting more rounds never
    # moves an answer a warm-started head trained on into the held-out set.
    base = [k for k in data.items if k[0] < args.held_out_rounds]
    held = [base[i] for i in np.random.default_rng(args.seed).permutation(len(base))][:args.held_out]
    held_set = set(held)
    train = [data.items[i] for i in np.random.default_rng(args.seed).permutation(len(data.items))
             if data.items[i] not in held_set]  # with only the first rounds extracted: the shipped head's order
    if args.max_sequences:
        train = train[:args.max_sequences]
    ckpt_dir = args.work / f"train-{args.name}"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    batches = []
    for epoch in range(args.epochs):
        order = [train[i] for i in np.random.default_rng(args.seed + epoch).permutation(len(train))]
        cur, n = [], 0
        for k in order:
            cur.append(k)
            n += int(data.rounds[k[0]][8][k[1] + 1] - data.rounds[k[0]][8][k[1]])
            if n >= args.pack_tokens:
                batches.append(cur)
                cur, n = [], 0
    total = len(batches)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total)))))
    step = 0
    ckpt = ckpt_dir / "checkpoint.pt"
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        step = state["step"]
        print(f"[train] resumed at step {step}/{total}", flush=True)
    print(f"[train] {args.name}: {sum(p.numel() for p in head.parameters()) / 1e6:.2f}M trainable params, "
          f"{len(train)} sequences in {len(data.rounds)} rounds, {total} packs of ~{args.pack_tokens} tokens, "
          f"steps {args.steps}", flush=True)
    t0, cpu0 = time.time(), time.process_time()
    while step < total:
        batch = pack([data.get(k) for k in batches[step]])
        head.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(args.bf16)):
            outs = unrolled_outputs(head, embed, batch, args.steps)
            losses = []
            for step_i, h in enumerate(outs):
                ok = step_rows(batch, step_i)
                idx, probs = law_targets(batch, ok, hid, tc.vocab_size)
                logp = torch.log_softmax((head.output(h[ok]) @ lm_rows.T).float(), -1)
                losses.append(-(probs * logp.gather(-1, idx)).sum(-1).mean())
            ce = sum(losses) / len(losses)
            loss = ce
            if args.feature_weight and cfg.reads_last:
                rows = step_rows(batch, 0)
                feat = F.smooth_l1_loss(outs[0][rows].float(), batch["last"][rows])
                loss = args.ce_weight * ce + args.feature_weight * feat
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 0.5)
        opt.step()
        sched.step()
        step += 1
        if step % 20 == 0 or step == total:
            print(f"[train] step {step}/{total} ce per step {[round(x.item(), 3) for x in losses]} "
                  f"{(time.time() - t0) / 60:.1f} min, {(time.process_time() - cpu0) / 3600:.2f} CPU-h", flush=True)
        if step % args.save_every == 0 or step == total:
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, ckpt)
    head.eval()
    acc = held_out_acceptance(head, embed, lm, data, held, args.steps_eval, hid)
    print(f"[train] {args.name}: held-out teacher-data acceptance by draft position (top-32 lower bound) {acc}",
          flush=True)
    (ckpt_dir / "held_out.json").write_text(json.dumps({"acceptance_by_position": acc}) + "\n")
    if args.out:
        save_head(head, args.out)
        print(f"[train] saved the head to {args.out}", flush=True)


@torch.no_grad()
def held_out_acceptance(head, embed, lm, data: FeatureData, keys: list, steps: int, hid) -> list[float]:
    """Mean sum_x min(p, q) at draft positions 1..steps, teacher-forced on held-out teacher answers, q the target's
    top-32 law (a lower bound on the full-vocabulary value)."""
    lm_rows = lm[hid] if hid is not None else lm
    sums, counts = [0.0] * steps, [0] * steps
    for chunk in range(0, len(keys), 8):
        batch = pack([data.get(k) for k in keys[chunk: chunk + 8]])
        for s, h in enumerate(unrolled_outputs(head, embed, batch, steps)):
            ok = step_rows(batch, s)
            p = torch.zeros(int(ok.sum()), lm.shape[0])
            p[:, hid if hid is not None else slice(None)] = torch.softmax((head.output(h[ok]) @ lm_rows.T).float(), -1)
            q_idx, q_p = batch["top_idx"][ok], batch["top_logp"][ok].float().exp()
            sums[s] += torch.minimum(p.gather(-1, q_idx), q_p).sum().item()
            counts[s] += len(q_idx)
    return [round(a / max(1, c), 4) for a, c in zip(sums, counts)]


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
