"""Teacher sampling: the target at temperature 1 writes prompts and answers them with its top-k log-probabilities
(stages questions, teacher and rounds)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch

from rsd.models.embedded import embedded_target_dir

from .corpus import GERMAN_SOURCES, NEWS_TOPICS, OPENERS, SYSTEM, chat_prompt, german_text

TOPK = 32


def load_target(dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = embedded_target_dir()
    return AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()


@torch.inference_mode()
def sample_batch(model, prompts: list[list[int]], max_new: int, stop_id: int, pad_id: int, topk: int = 0):
    """Sample at temperature 1 after left-padded prompts; optionally keep the teacher's top-k log-probs."""
    from transformers import DynamicCache

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    cache = DynamicCache()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, logits_to_keep=1)
    alive = torch.ones(len(prompts), dtype=torch.bool)
    tokens, top_idx, top_logp = [], [], []
    next_pos = pos[:, -1:] + 1
    for _ in range(max_new):
        logp = torch.log_softmax(out.logits[:, -1].float(), -1)
        tok = torch.multinomial(logp.exp(), 1)
        tok = torch.where(alive[:, None], tok, torch.full_like(tok, pad_id))
        tokens.append(tok)
        if topk:
            v, i = logp.topk(topk, -1)
            top_idx.append(i.to(torch.int32))
            top_logp.append(v.to(torch.float16))
        alive &= tok[:, 0] != stop_id
        if not alive.any():
            break
        mask = torch.cat([mask, alive[:, None].long()], -1)
        out = model(input_ids=tok, attention_mask=mask, position_ids=next_pos, cache=cache)
        next_pos = next_pos + 1
    tokens = torch.cat(tokens, 1)
    results = []
    for b in range(len(prompts)):
        row = tokens[b].tolist()
        n = row.index(stop_id) + 1 if stop_id in row else len(row)
        item = {"prompt": prompts[b], "answer": row[:n]}
        if topk:
            item["top_idx"] = torch.stack([t[b] for t in top_idx[:n]])
            item["top_logp"] = torch.stack([t[b] for t in top_logp[:n]])
        results.append(item)
    return results


def stage_questions(work: Path, n: int, batch: int) -> None:
    out = work / "questions.jsonl"
    done = sum(1 for _ in out.open()) if out.exists() else 0
    tok, model = load_target()
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    rng = random.Random(done)
    with out.open("a") as f:
        while done < n:
            openers = [rng.choice(OPENERS) for _ in range(batch)]
            prompts = [tok(SYSTEM + "<|im_start|>user\n" + o, add_special_tokens=False)["input_ids"] for o in openers]
            for o, r in zip(openers, sample_batch(model, prompts, 48, stop, tok.pad_token_id)):
                text = (o + tok.decode(r["answer"], skip_special_tokens=True)).strip()
                if r["answer"] and r["answer"][-1] == stop and 12 <= len(text) <= 300:
                    f.write(json.dumps({"question": text}) + "\n")
                    done += 1
            f.flush()
            print(f"questions: {done}/{n}", flush=True)


def answer_shards(work: Path, name: str, texts: list[str], batch: int, max_new: int) -> list[dict]:
    """Answer every text as a chat prompt, in shards of `batch` (resumable); returns all items."""
    tok, model = load_target()
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    items = []
    for start in range(0, len(texts), batch):
        shard = work / f"teacher-{name}-{start:06d}.pt"
        if not shard.exists():
            torch.manual_seed(start)
            chunk = texts[start:start + batch]
            t0 = time.time()
            res = sample_batch(model, [chat_prompt(tok, t) for t in chunk], max_new, stop, tok.pad_token_id, TOPK)
            for r, t in zip(res, chunk):
                r["text"] = t
            torch.save(res, shard.with_suffix(".tmp"))
            shard.with_suffix(".tmp").rename(shard)
            ntok = sum(len(r["answer"]) for r in res)
            print(f"teacher {name}: {start + len(chunk)}/{len(texts)} ({ntok / (time.time() - t0):.0f} tok/s)",
                  flush=True)
        items.extend(torch.load(shard))
    return items


def stage_teacher(work: Path, batch: int) -> None:
    tok = load_target()[0]
    questions = [json.loads(line)["question"] for line in (work / "questions.jsonl").open()]
    rng = random.Random(0)
    article_requests = [
        f"Write a short news article of about {rng.choice([80, 100, 120, 150])} words about {t}."
        for t in NEWS_TOPICS for _ in range(6)
    ]
    articles = answer_shards(work, "articles", article_requests, batch, 200)
    summaries = []
    for a in articles:
        body = tok.decode(a["answer"], skip_special_tokens=True).strip()
        if len(body.split()) >= 40:
            summaries.append(rng.choice([
                "Summarize the following news article in one sentence.\n\nArticle: {}",
                "Write a one-sentence summary of this article.\n\n{}",
                "{}\n\nSummarize the article above in a single sentence.",
            ]).format(body))
    answer_shards(work, "summaries", summaries, batch, 80)
    translations = [
        rng.choice(["Translate the following German text into English.\n\nGerman: {}",
                    "Translate from German to English: {}",
                    "What does this German sentence mean in English? {}"]).format(s)
        for s in GERMAN_SOURCES for _ in range(4)
    ]
    answer_shards(work, "translations", translations, batch, 64)
    answer_shards(work, "questions", questions, batch, 160)


def compact(items: list[dict]) -> list[dict]:
    """Drop empty answers; keep token ids as int lists and the teacher's top-k as int32/float16 tensors."""
    return [it for it in items if it["answer"]]


def stage_rounds(work: Path, rounds: int, batch: int, dtype: torch.dtype, first: int = 0) -> None:
    """On-policy teacher data in self-contained rounds (resumable per round, each seeded by its index).

    A round: the target writes `batch` questions, answers them (Dolly style); writes `batch` news articles and
    summarises each in one sentence (XSum style); translates `batch` templated German sentences (WMT style). Every
    answer token keeps the target's top-k log-probabilities. Only answers to the target's own prompts are kept, so
    the built-in evaluation prompts stay held out.
    """
    tok, model = load_target(dtype)
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    out = work / "rounds"
    out.mkdir(parents=True, exist_ok=True)
    for r in range(first, rounds):
        shard = out / f"round-{r:05d}.pt"
        if shard.exists():
            continue
        t0 = time.time()
        rng = random.Random(1_000_003 * (r + 1))
        torch.manual_seed(r)
        openers = [rng.choice(OPENERS) for _ in range(batch)]
        heads = [tok(SYSTEM + "<|im_start|>user\n" + o, add_special_tokens=False)["input_ids"] for o in openers]
        questions = []
        for o, q in zip(openers, sample_batch(model, heads, 48, stop, tok.pad_token_id)):
            text = (o + tok.decode(q["answer"], skip_special_tokens=True)).strip()
            if q["answer"] and q["answer"][-1] == stop and 12 <= len(text) <= 300:
                questions.append(text)
        requests = [f"Write a short news article of about {rng.choice([80, 100, 120, 150])} words about "
                    f"{rng.choice(NEWS_TOPICS)}." for _ in range(batch)]
        translations = [rng.choice(["Translate the following German text into English.\n\n{}",
                                    "Translate from German to English: {}",
                                    "What does this German text mean in English? {}"]).format(german_text(rng))
                        for _ in range(batch)]
        items = []
        for style, texts, max_new in (("dolly", questions, 160), ("articles", requests, 200),
                                      ("wmt", translations, 80)):
            if not texts:
                continue
            res = sample_batch(model, [chat_prompt(tok, t) for t in texts], max_new, stop, tok.pad_token_id, TOPK)
            for it, t in zip(res, texts):
                it["text"], it["style"] = t, style
            items.extend(res)
        summaries = []
        for it in items:
            body = tok.decode(it["answer"], skip_special_tokens=True).strip()
            if it["style"] == "articles" and len(body.split()) >= 40:
                summaries.append(rng.choice([
                    "Summarize the following news article in one sentence.\n\n{}",
                    "Write a one-sentence summary of this article.\n\n{}",
                    "{}\n\nSummarize the article above in a single sentence.",
                ]).format(body))
        if summaries:
            res = sample_batch(model, [chat_prompt(tok, t) for t in summaries], 80, stop, tok.pad_token_id, TOPK)
            for it, t in zip(res, summaries):
                it["text"], it["style"] = t, "xsum"
            items.extend(res)
        items = compact(items)
        torch.save(items, shard.with_suffix(".tmp"))
        shard.with_suffix(".tmp").rename(shard)
        ntok = sum(len(it["answer"]) for it in items)
        print(f"round {r + 1}/{rounds}: {len(items)} answers, {ntok} tokens ({ntok / (time.time() - t0):.0f} tok/s)",
              flush=True)
