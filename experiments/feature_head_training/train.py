"""Training the head on the extracted features: packing, the unrolled loss's rows and targets, the training stage
and the held-out acceptance by draft position."""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rsd.models.feature_head.unrolled import unrolled_outputs

from .features import LAYERS, load_target, round_sequences

DRAFT_V3 = Path(__file__).resolve().parent.parent.parent / "rsd" / "assets" / "smollm2-draft-v3"


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
