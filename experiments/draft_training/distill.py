"""Distillation of the draft: its architecture and initialisation, the loss on the teacher's top-k laws, the
held-out acceptance on them, the training stage and the save."""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path

import torch

from .rounds import load_teacher_items
from .teacher import TOPK, load_target


def draft_config(target_config, width: int, layers: int, head_ids: list[int] | None = None):
    """A small Llama with the target's tokenizer; with `head_ids`, a trimmed head over those target tokens only."""
    from transformers import LlamaConfig

    from rsd.models.trimmed import TrimmedLlamaConfig

    kwargs = dict(
        vocab_size=target_config.vocab_size, hidden_size=width, intermediate_size=3 * width,
        num_hidden_layers=layers, num_attention_heads=width // 32, num_key_value_heads=max(1, width // 64),
        head_dim=32, max_position_embeddings=target_config.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, rms_norm_eps=1e-5,
        tie_word_embeddings=True, bos_token_id=target_config.bos_token_id, eos_token_id=target_config.eos_token_id,
        pad_token_id=target_config.pad_token_id,
    )
    if not head_ids:
        return LlamaConfig(**kwargs)
    kwargs.update(vocab_size=len(head_ids) + 1, pad_token_id=len(head_ids))
    return TrimmedLlamaConfig(head_token_ids=head_ids, full_vocab_size=target_config.vocab_size, **kwargs)


def head_vocabulary(items: list[dict], n: int, always: list[int]) -> list[int]:
    """The n target tokens the trimmed head covers: `always` (EOS and other specials), then the most frequent
    answer tokens of the training data (ties by id, so the choice is reproducible)."""
    counts: dict[int, int] = {}
    for it in items:
        for t in it["answer"]:
            counts[t] = counts.get(t, 0) + 1
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    chosen = list(dict.fromkeys(always))
    chosen += [t for t in ranked if t not in set(always)][: n - len(chosen)]
    return sorted(chosen)


def init_embedding(model, target, head_ids: list[int] | None, width: int, init_scale: float) -> None:
    """PCA of the target's token embedding gives the draft a head start on token similarity (the shared row of a
    trimmed vocabulary gets the mean of the tokens it stands for)."""
    emb = target.get_input_embeddings().weight.detach().float()
    centred = emb - emb.mean(0)
    _, _, v = torch.linalg.svd(centred[torch.randperm(len(centred))[:8192]], full_matrices=False)
    proj = centred @ v[:width].T
    proj = proj / proj.std() * init_scale
    if head_ids:
        rest = torch.ones(len(proj), dtype=torch.bool)
        rest[head_ids] = False
        proj = torch.cat([proj[head_ids], proj[rest].mean(0, keepdim=True)])
    model.get_input_embeddings().weight.data.copy_(proj)


def stage_train(args: argparse.Namespace, lr: float, init_from: Path | None = None) -> None:
    """Distil a draft on the cached teacher laws (forward KL on answer tokens), saving to `args.out` after each epoch
    (the command-line options name the data, the architecture and the schedule)."""
    work, out, seed, max_len = args.work, args.out, args.seed, args.max_len
    from transformers import AutoModelForCausalLM

    import rsd.models.trimmed  # noqa: F401  (registers the trimmed-head model class)

    torch.manual_seed(seed)
    tok, target = load_target()
    items = [it for it in load_teacher_items(work, args.data, args.tokens_dir) if it["answer"]]
    rng = random.Random(seed)
    rng.shuffle(items)
    # Acceptance needs the teacher's law: hold out soft items where there are any. On sampled targets the same number
    # is E_q[p(x)] = sum_x p q, a proxy that rises with acceptance.
    soft = [i for i, it in enumerate(items) if it["soft"]] or list(range(len(items)))
    held_idx = set(soft[: min(64, len(soft) // 10)])
    held = [it for i, it in enumerate(items) if i in held_idx]
    train = [it for i, it in enumerate(items) if i not in held_idx]
    if init_from is not None:  # continue training a saved draft
        model = AutoModelForCausalLM.from_pretrained(init_from, dtype=torch.float32)
    else:
        specials = sorted({tok.convert_tokens_to_ids(t) for t in tok.all_special_tokens})
        head_ids = head_vocabulary(train, args.head_vocab, specials) if args.head_vocab else None
        model = AutoModelForCausalLM.from_config(draft_config(target.config, args.width, args.layers, head_ids))
        init_embedding(model, target, head_ids, args.width, args.init_scale)
    del target
    ntok = sum(len(it["answer"]) for it in train)
    nsoft = sum(len(it["answer"]) for it in train if it["soft"])
    print(f"draft: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params; {len(train)} sequences, "
          f"{ntok} answer tokens ({nsoft} with top-{TOPK} teacher laws, the rest with sampled tokens)", flush=True)
    tokens_per_batch, epochs = args.tokens_per_batch, args.epochs
    steps_per_epoch = max(1, ntok // tokens_per_batch)
    total = epochs * steps_per_epoch
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 100) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total))))
    step, t0 = 0, time.time()
    for epoch in range(epochs):
        rng.shuffle(train)
        batches, cur, cur_tok = [], [], 0
        for it in train:
            cur.append(it)
            cur_tok += len(it["answer"])
            if cur_tok >= tokens_per_batch:
                batches.append(cur)
                cur, cur_tok = [], 0
        for b in batches:
            model.train()
            loss = distill_loss(model, b, max_len, tok.pad_token_id, args.loss)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            if step % 50 == 0 and held:
                acc = acceptance(model, held, max_len, tok.pad_token_id)
                print(f"epoch {epoch} step {step}/{total} loss {loss.item():.3f} held-out acceptance {acc:.3f} "
                      f"({(time.time() - t0) / 60:.1f} min)", flush=True)
        save_draft(model, tok, out)
    print(f"saved draft to {out}")


def save_draft(model, tok, out: Path) -> None:
    """Write the draft in float16 (atomically: a killed save leaves the previous epoch's draft in place)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    model.half().save_pretrained(tmp)
    tok.save_pretrained(tmp)
    model.float()
    if out.exists():
        for f in tmp.iterdir():
            f.replace(out / f.name)
        tmp.rmdir()
    else:
        tmp.rename(out)


def pack(batch: list[dict], max_len: int, pad_id: int):
    """Right-pad prompt+answer sequences (answers kept whole, prompts cut from the left to fit max_len)."""
    seqs, starts = [], []
    for it in batch:
        seq = list(it["prompt"]) + list(it["answer"])
        cut = max(0, len(seq) - max_len)
        seqs.append(seq[cut:])
        starts.append(len(it["prompt"]) - cut)
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask, starts


def draft_answer_logp(model, batch: list[dict], max_len: int, pad_id: int):
    """Draft log-probs at the positions that predict each answer token, plus the teacher's top-k there, in the
    draft's output space: a trimmed head's N tokens (the teacher's mass outside them is dropped and the rest
    renormalised, the best any draft with that head can match), else the full vocabulary.

    The output layer dominates the cost, so it is applied only to the answer positions.
    """
    trimmed = hasattr(model, "to_trimmed")
    ids, mask, starts = pack(batch, max_len, pad_id)
    hidden = model.model(input_ids=model.to_trimmed(ids) if trimmed else ids, attention_mask=mask).last_hidden_state
    rows, t_idx, t_logp = [], [], []
    for i, it in enumerate(batch):
        n = min(len(it["answer"]), ids.shape[1] - starts[i] + 1)
        rows.append(hidden[i, starts[i] - 1:starts[i] - 1 + n])
        t_idx.append(it["top_idx"][:n].long())
        t_logp.append(it["top_logp"][:n].float())
    logits, t_idx, t_logp = model.lm_head(torch.cat(rows)), torch.cat(t_idx), torch.cat(t_logp)
    if trimmed:
        n_head = logits.shape[-1] - 1  # the last row is the shared input embedding of all other tokens, never drafted
        logits, t_idx = logits[:, :n_head], model.to_trimmed(t_idx)
        t_logp = t_logp.masked_fill(t_idx == n_head, float("-inf"))
        t_idx = t_idx.clamp(max=n_head - 1)
    return torch.log_softmax(logits.float(), -1), t_idx, t_logp


def distill_loss(model, batch: list[dict], max_len: int, pad_id: int, kind: str = "kl") -> torch.Tensor:
    """`kl`: cross-entropy to the teacher's top-k law renormalised (its tail carries little mass at temperature 1);
    `tv`: 1 - sum_x min(p, q) over that law, the rejection rate a verifier pays (for a sampled token x: 1 - p(x));
    `kl+tv`: their sum."""
    logp, t_idx, t_logp = draft_answer_logp(model, batch, max_len, pad_id)
    keep = torch.isfinite(t_logp).any(-1)  # positions whose teacher top-k has no token the head covers teach nothing
    teacher = torch.softmax(t_logp[keep], -1)
    draft = logp[keep].gather(-1, t_idx[keep])
    kl = -(teacher * draft).sum(-1).mean()
    tv = 1 - torch.minimum(draft.exp(), teacher).sum(-1).mean()
    return {"kl": kl, "tv": tv, "kl+tv": kl + tv}[kind]


@torch.inference_mode()
def acceptance(model, items: list[dict], max_len: int, pad_id: int) -> float:
    """Mean sum_x min(p, q) with q the teacher's top-k mass (a lower bound on the full-vocabulary value)."""
    model.eval()
    logp, t_idx, t_logp = draft_answer_logp(model, items, max_len, pad_id)
    return torch.minimum(logp.exp().gather(-1, t_idx), t_logp.exp()).sum(-1).mean().item()
