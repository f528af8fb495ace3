"""What limits a draft's acceptance: its head's coverage, its fit to the data it saw, and the shift to new prompts.

    python experiments/draft_limits.py rsd/assets/smollm2-draft-v3 --seen 19-27 --unseen 28-30

Three measurements at temperature 1, each the mean per-token acceptance sum_x min(p, q) of the draft p against the
target q, with the target's mass on the tokens the draft can propose (its coverage, an upper bound on acceptance),
each ± its standard error over answers or prompts (the independent units):

  seen      answer tokens of teacher rounds the draft was trained on (their cached top-32 laws: a lower bound)
  unseen    answer tokens of later rounds from the same generator, never trained on (the same lower bound)
  held-out  fresh target answers to the built-in prompt sets (full vocabulary, as `train_draft.py eval`)

seen >> unseen would say the draft memorises and more data is the lever; seen ~ unseen says the draft generalises as
far as its capacity and training let it, so capacity (or longer training) is; unseen >> held-out measures the shift
from the generated training prompts to the built-in ones; coverage bounds what any draft with this head can reach.
Rounds come from experiments/teacher_v2 with their laws in --work/rounds (`train_draft.py rounds` or `rescore`).
"""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

import torch
from draft_training.distill import draft_answer_logp
from draft_training.evaluate import answer_acceptance
from draft_training.teacher import load_target

from rsd.models.embedded import cache_root


def round_range(text: str) -> range:
    """'19-27' -> range(19, 28)."""
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def soft_items(work: Path, rounds: range, limit: int, seed: int) -> list[dict]:
    """Up to `limit` answers (random, seeded) of `rounds` that have cached teacher laws."""
    items = []
    for r in rounds:
        shard = work / "rounds" / f"round-{r:05d}.pt"
        if not shard.exists():
            raise SystemExit(f"{shard} is missing: make it with `train_draft.py rounds` or `rescore`")
        items += [it for it in torch.load(shard) if it["answer"]]
    random.Random(seed).shuffle(items)
    return items[:limit]


def ratio(rows: list[tuple[float, float]]) -> tuple[float, float]:
    """sum(a) / sum(n) over independent units (answers, prompts) and its standard error (the linearised ratio
    estimator), for per-token means whose units have different token counts."""
    a, n = sum(r[0] for r in rows), sum(r[1] for r in rows)
    mean = a / n
    resid = sum((ai - mean * ni) ** 2 for ai, ni in rows)
    return mean, math.sqrt(resid / (len(rows) * (len(rows) - 1))) * len(rows) / n


@torch.inference_mode()
def teacher_rows(model, items: list[dict], pad_id: int, max_len: int = 384) -> list[tuple[float, float, int]]:
    """Per answer: summed acceptance and coverage over the teacher's top-k laws, and its token count (batches of 16)."""
    rows = []
    for i in range(0, len(items), 16):
        batch = items[i:i + 16]
        logp, t_idx, t_logp = draft_answer_logp(model, batch, max_len, pad_id)
        q = t_logp.exp()  # zero outside the draft's head (draft_answer_logp masks those tokens)
        acc = torch.minimum(logp.exp().gather(-1, t_idx), q).sum(-1)
        cov = q.sum(-1)
        at = 0
        for it in batch:  # draft_answer_logp concatenates the answers' positions in batch order
            n = min(len(it["answer"]), max_len)
            rows.append((acc[at:at + n].sum().item(), cov[at:at + n].sum().item(), n))
            at += n
        assert at == len(q), "answer lengths and positions disagree"
    return rows


def line(label: str, acc: list[tuple[float, float]], cov: list[tuple[float, float]]) -> tuple[float, float]:
    """Print acceptance and coverage, each ± its SE; return the acceptance and its SE."""
    (a, a_se), (c, c_se) = ratio(acc), ratio(cov)
    print(f"{label:44s} {a:6.3f} ± {a_se:.3f} {c:7.3f} ± {c_se:.3f}", flush=True)
    return a, a_se


@torch.inference_mode()
def main() -> None:
    from transformers import AutoModelForCausalLM

    import rsd.models.trimmed  # noqa: F401  (registers the trimmed-head model class)
    from rsd.data import load_builtin

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("draft", type=Path)
    ap.add_argument("--seen", type=round_range, default=round_range("19-27"), help="rounds the draft trained on")
    ap.add_argument("--unseen", type=round_range, default=round_range("28-30"), help="rounds it never saw")
    ap.add_argument("--answers", type=int, default=192, help="teacher answers per group")
    ap.add_argument("--prompts", type=int, default=16, help="built-in prompts per set")
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--work", type=Path, default=cache_root() / "draft-work-v2")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok, target = load_target()
    draft = AutoModelForCausalLM.from_pretrained(args.draft, dtype=torch.float32).eval()
    print(f"{'data (mean ± SE over answers or prompts)':44s} {'acceptance':>14s} {'coverage':>15s}")
    means = []
    for name, rounds in (("seen", args.seen), ("unseen", args.unseen)):
        rows = teacher_rows(draft, soft_items(args.work, rounds, args.answers, 0), tok.pad_token_id)
        label = f"{name} rounds {rounds.start}-{rounds.stop - 1} (top-32 bound)"
        means.append(line(label, [(r[0], r[2]) for r in rows], [(r[1], r[2]) for r in rows]))
    (seen, seen_se), (unseen, unseen_se) = means
    print(f"{'seen - unseen (95% CI)':44s} {seen - unseen:+6.3f} ± {1.96 * math.hypot(seen_se, unseen_se):.3f}")
    torch.manual_seed(0)
    pooled = []
    for name in ("xsum_builtin", "wmt_builtin", "dolly_builtin"):
        rows = answer_acceptance(tok, target, [draft], load_builtin(name)[:args.prompts], args.max_new)
        rows = [(r[0][0], r[2], r[3][0]) for r in rows]
        pooled += rows
        line(f"held-out {name}", [(a, n) for a, n, _ in rows], [(c, n) for _, n, c in rows])
    line("held-out, all three sets", [(a, n) for a, n, _ in pooled], [(c, n) for _, n, c in pooled])

if __name__ == "__main__":
    main()
