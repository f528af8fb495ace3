"""Evaluation of drafts on fresh target answers to the built-in prompt sets (acceptance at T = 1, greedy agreement)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .corpus import chat_prompt
from .teacher import load_target, sample_batch


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
