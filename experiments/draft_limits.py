"""What limits a draft's acceptance: its head's coverage, its fit to the data it saw, and the shift to new prompts.

    python experiments/draft_limits.py rsd/assets/smollm2-draft-v3 --seen 19-27 --unseen 28-30

Three measurements at temperature 1, each the mean per-token acceptance sum_x min(p, q) of the draft p against the
target q, with the target's mass on the tokens the draft can propose (its coverage, an upper bound on acceptance):

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
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_draft import answer_acceptance, draft_answer_logp, load_target  # noqa: E402

from rsd.models.embedded import cache_root  # noqa: E402


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


@torch.inference_mode()
def teacher_acceptance(model, items: list[dict], pad_id: int, max_len: int = 384) -> tuple[float, float]:
    """(acceptance, coverage) per answer token over the teacher's top-k laws, in batches of 16 answers."""
    acc = cov = count = 0.0
    for i in range(0, len(items), 16):
        batch = items[i:i + 16]
        logp, t_idx, t_logp = draft_answer_logp(model, batch, max_len, pad_id)
        q = t_logp.exp()  # zero outside the draft's head (draft_answer_logp masks those tokens)
        acc += torch.minimum(logp.exp().gather(-1, t_idx), q).sum().item()
        cov += q.sum().item()
        count += len(q)
    return acc / count, cov / count


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
    print(f"{'data':40s} {'acceptance':>10s} {'coverage':>9s}")
    for name, rounds in (("seen", args.seen), ("unseen", args.unseen)):
        acc, cov = teacher_acceptance(draft, soft_items(args.work, rounds, args.answers, 0), tok.pad_token_id)
        label = f"{name} rounds {rounds.start}-{rounds.stop - 1} (top-32 bound)"
        print(f"{label:40s} {acc:10.3f} {cov:9.3f}", flush=True)
    torch.manual_seed(0)
    pooled = [0.0, 0.0, 0]
    for name in ("xsum_builtin", "wmt_builtin", "dolly_builtin"):
        rows = answer_acceptance(tok, target, [draft], load_builtin(name)[:args.prompts], args.max_new)
        acc, n, cov = (sum(r[0][0] for r in rows), sum(r[2] for r in rows), sum(r[3][0] for r in rows))
        pooled = [pooled[0] + acc, pooled[1] + cov, pooled[2] + n]
        print(f"{'held-out ' + name:40s} {acc / n:10.3f} {cov / n:9.3f}", flush=True)
    print(f"{'held-out, all three sets':40s} {pooled[0] / pooled[2]:10.3f} {pooled[1] / pooled[2]:9.3f}")


if __name__ == "__main__":
    main()
