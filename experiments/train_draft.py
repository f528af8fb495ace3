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
import json
import math
import random
import time
from pathlib import Path

import torch

from rsd.models.embedded import cache_root, embedded_target_dir

DRAFT_DIR = Path(__file__).resolve().parent.parent / "rsd" / "assets" / "smollm2-draft-v3"

TOPK = 32
SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
OPENERS = [
    "What", "How", "Why", "Explain", "Write", "Describe", "Give me", "List", "Can you", "Summarize", "Tell me",
    "Compare", "Suggest", "Which", "When", "Who", "Is it", "Help me", "Create", "Classify", "Brainstorm",
    "What are", "How do I", "Name", "Please", "I need", "Rewrite", "Extract", "Define", "Plan",
]
NEWS_TOPICS = [
    "a city council approving a new bike lane network", "a heatwave breaking temperature records in Europe",
    "a local football club winning promotion", "a new species of frog found in a rainforest",
    "a tech company laying off staff", "a train strike disrupting commuters", "a museum returning stolen artefacts",
    "a breakthrough in battery research", "flooding in a coastal town", "a school introducing a four-day week",
    "a central bank raising interest rates", "a rescue of hikers stranded on a mountain", "a new hospital opening",
    "a drought hitting farmers", "an election result in a small country", "a spacecraft landing on the Moon",
    "a celebrity chef opening a restaurant", "a cyber attack on a hospital", "a record sale at an art auction",
    "a wildfire forcing evacuations", "a charity marathon raising money", "a factory closing down",
    "a new law on plastic bags", "a zoo welcoming a baby elephant", "a bridge closed for repairs",
    "rising house prices in a capital city", "a scientist winning a major prize", "a power cut across a region",
    "a festival cancelled because of storms", "a university cutting tuition fees", "a data leak at a bank",
    "a village fighting to keep its post office", "a new vaccine approved by regulators", "a ferry running aground",
    "a court ruling on workers' rights", "an airline cancelling flights", "a teenager winning a chess title",
    "a volcano erupting near a tourist area", "a supermarket chain raising wages", "a police operation against fraud",
    "a historic theatre reopening", "an oil spill near a beach", "a new metro line opening",
    "a study linking sleep and memory", "a government budget announcement", "a wind farm approved offshore",
    "a dog that travelled hundreds of miles home", "a hospital waiting-list crisis", "a mayor resigning",
    "a shipwreck discovered by divers", "a ban on smartphones in schools", "food prices rising after a bad harvest",
]
GERMAN_SOURCES = [
    "Die Regierung hat heute neue Regeln für den Bahnverkehr vorgestellt.",
    "Im Sommer fahren viele Familien an die Ostsee.",
    "Der Preis für Strom ist im letzten Jahr stark gestiegen.",
    "Mein Bruder arbeitet seit zehn Jahren als Lehrer in München.",
    "Die Ausstellung zeigt Bilder aus dem neunzehnten Jahrhundert.",
    "Nach dem Sturm waren viele Straßen gesperrt.",
    "Wir treffen uns morgen um acht Uhr vor dem Bahnhof.",
    "Das neue Gesetz soll kleine Unternehmen entlasten.",
    "Die Mannschaft hat das Spiel in der letzten Minute gewonnen.",
    "Viele Menschen arbeiten inzwischen von zu Hause aus.",
    "Der Bürgermeister versprach, mehr Wohnungen zu bauen.",
    "Die Forscher haben eine neue Methode zur Wasserreinigung entwickelt.",
    "Am Wochenende soll es in ganz Deutschland regnen.",
    "Die Bibliothek bleibt wegen Renovierung bis März geschlossen.",
    "Der Zug hatte wegen einer Störung eine Stunde Verspätung.",
    "Sie hat ihr Studium mit Auszeichnung abgeschlossen.",
    "Die Firma will im nächsten Jahr zweihundert neue Mitarbeiter einstellen.",
    "In der Stadt gibt es immer weniger kleine Läden.",
    "Der Arzt empfiehlt, mehr Wasser zu trinken.",
    "Das Konzert war schon nach wenigen Minuten ausverkauft.",
    "Die Polizei sucht nach Zeugen des Unfalls.",
    "Unsere Nachbarn haben einen kleinen Hund aus dem Tierheim geholt.",
    "Die Schule bekommt endlich schnelles Internet.",
    "Der Fluss ist nach dem starken Regen über die Ufer getreten.",
    "Die Verhandlungen zwischen den Parteien dauerten bis spät in die Nacht.",
    "Ich habe das Buch in zwei Tagen gelesen.",
    "Das Museum bietet jeden Sonntag kostenlose Führungen an.",
    "Die Zahl der Touristen ist wieder gestiegen.",
    "Der Bäcker an der Ecke öffnet schon um sechs Uhr morgens.",
    "Die Ministerin kündigte mehr Geld für Schulen an.",
]


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


def chat_prompt(tok, text: str) -> list[int]:
    return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True,
                                   return_dict=True)["input_ids"]


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


GERMAN_SUBJECTS = [
    "Die Stadtverwaltung", "Der Bürgermeister", "Die Polizei", "Die Bundesregierung", "Das Unternehmen",
    "Der Verein", "Die Schule", "Die Forscherin", "Der Vorstand", "Die Gewerkschaft", "Das Krankenhaus",
    "Die Bahn", "Der Minister", "Die Feuerwehr", "Das Museum", "Die Universität", "Der Trainer", "Die Bank",
]
GERMAN_VERBS = [
    "hat am Montag angekündigt, dass", "teilte am Dienstag mit, dass", "erklärte auf einer Pressekonferenz, dass",
    "räumte ein, dass", "bestätigte am Abend, dass", "warnte davor, dass", "hofft, dass",
]
GERMAN_CLAUSES = [
    "die Brücke für sechs Wochen gesperrt wird", "die Preise im nächsten Jahr weiter steigen werden",
    "mehr Geld in den Ausbau des Schienennetzes fließen soll", "das Konzert wegen des Regens ausfällt",
    "niemand bei dem Unfall schwer verletzt wurde", "die Nachfrage deutlich unterschätzt wurde",
    "zweihundert neue Stellen geschaffen werden", "die Bauarbeiten bis zum Herbst dauern werden",
    "die Zahl der Besucher stark gestiegen ist", "die Verhandlungen fortgesetzt werden",
    "ein neues Gesetz kleine Betriebe entlasten soll", "die Ausstellung bis März verlängert wird",
    "der Flughafen wegen eines Streiks geschlossen bleibt", "die Mieten in der Innenstadt stark gestiegen sind",
    "das Wasser in der Region knapp wird", "die Züge in der Nacht wieder fahren sollen",
]
GERMAN_TAILS = [
    "", " Bereits gekaufte Karten behalten ihre Gültigkeit.", " Die Opposition kritisierte die Entscheidung scharf.",
    " Eine Entscheidung soll noch in diesem Monat fallen.", " Anwohner hatten sich seit Jahren darüber beschwert.",
    " Weitere Einzelheiten wurden zunächst nicht bekannt.",
]
STYLES = ("dolly", "xsum", "wmt")


def german_text(rng: random.Random) -> str:
    """A WMT-style German news sentence from templates (varied enough for translation prompts)."""
    return f"{rng.choice(GERMAN_SUBJECTS)} {rng.choice(GERMAN_VERBS)} {rng.choice(GERMAN_CLAUSES)}." \
           f"{rng.choice(GERMAN_TAILS)}"


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


def stage_export(work: Path, dest: Path) -> None:
    """Write the rounds' token ids (prompts and answers, no teacher distributions) to `dest` as one compressed file
    per round, small enough to commit; `rescore` rebuilds the top-k teacher distributions from them."""
    import numpy as np

    dest.mkdir(parents=True, exist_ok=True)
    for shard in sorted((work / "rounds").glob("round-*.pt")):
        out = dest / (shard.stem + ".npz")
        if out.exists():
            continue
        items = torch.load(shard)
        np.savez_compressed(
            out, style=np.array([it["style"] for it in items]),
            prompt_len=np.array([len(it["prompt"]) for it in items], dtype=np.int32),
            answer_len=np.array([len(it["answer"]) for it in items], dtype=np.int32),
            tokens=np.array([t for it in items for t in list(it["prompt"]) + list(it["answer"])], dtype=np.uint16))
        print(f"exported {out}", flush=True)


@torch.inference_mode()
def stage_rescore(work: Path, src: Path, dtype: torch.dtype, batch: int) -> None:
    """Rebuild rounds/round-*.pt (the target's top-k log-probs at every answer token) from exported token ids, by
    batched teacher-forced forwards (a few times faster per token than sampling them). In bfloat16 the rebuilt laws
    equal the sampled ones up to rounding (measured on 480 tokens: top-1 token agrees on 96-99%, |d log p| <= 0.2)."""
    tok, model = load_target(dtype)
    (work / "rounds").mkdir(parents=True, exist_ok=True)
    for f in sorted(src.glob("round-*.npz")):
        shard = work / "rounds" / (f.stem + ".pt")
        if shard.exists():
            continue
        items = round_items(f)
        for start in range(0, len(items), batch):
            chunk = items[start:start + batch]
            width = max(len(it["prompt"]) + len(it["answer"]) for it in chunk)
            ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for b, it in enumerate(chunk):
                seq = it["prompt"] + it["answer"]
                ids[b, :len(seq)] = torch.tensor(seq)
                mask[b, :len(seq)] = 1
            logits = model(input_ids=ids, attention_mask=mask).logits
            for b, it in enumerate(chunk):
                n, m = len(it["prompt"]), len(it["answer"])
                v, i = torch.log_softmax(logits[b, n - 1:n - 1 + m].float(), -1).topk(TOPK, -1)
                it["top_idx"], it["top_logp"] = i.to(torch.int32), v.to(torch.float16)
        torch.save(items, shard.with_suffix(".tmp"))
        shard.with_suffix(".tmp").rename(shard)
        print(f"rescored {shard}", flush=True)


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


def round_items(npz: Path) -> list[dict]:
    """One exported round's prompts, answers and styles (token ids only)."""
    import numpy as np

    z = np.load(npz)
    bounds = np.cumsum(np.concatenate([[0], z["prompt_len"] + z["answer_len"]]))
    items = []
    for i in range(len(z["style"])):
        seq = z["tokens"][bounds[i]:bounds[i + 1]].astype(np.int64).tolist()
        n = int(z["prompt_len"][i])
        items.append({"prompt": seq[:n], "answer": seq[n:], "style": str(z["style"][i])})
    return items


def sampled_targets(item: dict) -> dict:
    """The sampled answer token as a one-point teacher law: cross-entropy to a sample of q is an unbiased estimate
    of the cross-entropy to q (noisier than the top-k law, and free: no teacher forward)."""
    m = len(item["answer"])
    top_idx = torch.zeros(m, TOPK, dtype=torch.int32)
    top_idx[:, 0] = torch.tensor(item["answer"], dtype=torch.int32)
    top_logp = torch.full((m, TOPK), float("-inf"), dtype=torch.float16)
    top_logp[:, 0] = 0.0
    return {**item, "top_idx": top_idx, "top_logp": top_logp, "soft": False}


def load_teacher_items(work: Path, data: str, tokens_dir: Path) -> list[dict]:
    """Training items with teacher laws. `rounds` (v2): each exported round in `tokens_dir`, with the target's
    top-k laws where `rescore` has rebuilt them (work/rounds/round-*.pt), else with the sampled tokens as targets.
    `teacher` (v1): the top-k shards work/teacher-*.pt."""
    items = []
    if data == "teacher":
        for shard in sorted(work.glob("teacher-*.pt")):
            items.extend({**it, "soft": True} for it in torch.load(shard))
    else:
        for npz in sorted(tokens_dir.glob("round-*.npz")):
            shard = work / "rounds" / (npz.stem + ".pt")
            if shard.exists():
                items.extend({**it, "soft": True} for it in torch.load(shard))
            else:
                items.extend(sampled_targets(it) for it in round_items(npz))
    if not items:
        raise SystemExit(f"no teacher data for --data {data} in {work} / {tokens_dir}")
    return items


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


@torch.inference_mode()
def answer_acceptance(tok, target, drafts: list, examples: list, max_new: int
                      ) -> list[tuple[list, list, int, list]]:
    """The target answers each example once at temperature 1; per answer: each draft's summed acceptance
    sum_x min(p, q) over the answer tokens, its greedy agreements (argmax p == argmax q), the token count, and the
    summed target mass on the tokens the draft can propose (p > 0: a trimmed head's coverage, a bound on acceptance)."""
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    rows = []
    for r in sample_batch(target, [chat_prompt(tok, ex.prompt) for ex in examples], max_new, stop, tok.pad_token_id):
        seq = torch.tensor([r["prompt"] + r["answer"]])
        start = len(r["prompt"]) - 1
        q = torch.softmax(target(input_ids=seq).logits[0, start:-1].float(), -1)
        ps = [torch.softmax(d(input_ids=seq).logits[0, start:-1].float(), -1) for d in drafts]
        rows.append(([torch.minimum(p, q).sum().item() for p in ps],
                     [(p.argmax(-1) == q.argmax(-1)).sum().item() for p in ps], len(q),
                     [q[p > 0].sum().item() for p in ps]))
    return rows


@torch.inference_mode()
def stage_eval(draft_dir: Path, n_per_set: int, max_new: int) -> dict:
    """Acceptance (T=1) and greedy agreement of a draft on target answers to the built-in prompts; written to
    draft_dir/acceptance.json."""
    from transformers import AutoModelForCausalLM

    import rsd.models.trimmed  # noqa: F401  (registers the trimmed-head model class)
    from rsd.data import load_builtin

    tok, target = load_target()
    draft = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32).eval()
    torch.manual_seed(0)
    report = {}
    for name in ("xsum_builtin", "wmt_builtin", "dolly_builtin"):
        rows = answer_acceptance(tok, target, [draft], load_builtin(name)[:n_per_set], max_new)
        count = sum(n for _, _, n, _ in rows)
        report[name] = {"acceptance_t1": sum(a[0] for a, _, _, _ in rows) / count,
                        "greedy_agreement": sum(g[0] for _, g, _, _ in rows) / count, "tokens": count}
        print(name, report[name], flush=True)
    total = sum(v["tokens"] for v in report.values())
    report["all"] = {k: sum(v[k] * v["tokens"] for v in report.values()) / total
                     for k in ("acceptance_t1", "greedy_agreement")}
    report["all"]["tokens"] = total
    report["draft_params"] = sum(p.numel() for p in draft.parameters())
    report["target_params"] = sum(p.numel() for p in target.parameters())
    print(json.dumps(report["all"]), flush=True)
    (draft_dir / "acceptance.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


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
