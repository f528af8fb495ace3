"""Calibration of finished runs against their target: do the recorded tokens follow the target's law?

For every generated token x_t the target's processed law q_t(.) = q(. | prompt, x_<t) is recomputed with one plain
forward pass over the whole sequence (no cache, no tree). Under a lossless method the tokens are draws from q_t, so
  - the randomised probability integral transform u_t = Q_t(x_t-) + V q_t(x_t), with tokens ordered by descending
    q_t and V ~ U(0,1), is i.i.d. uniform (Kolmogorov-Smirnov test), and
  - z = sum_t (log q_t(x_t) + H(q_t)) / sqrt(sum_t Var_t[log q_t]) is approximately standard normal
    (a method that favours likely tokens drifts positive, one that favours unlikely tokens negative).
A real-model complement to the tiny-model oracles of `rsd.certify`; it needs the run's models.

    python -m analysis.calibration RUN_DIRS...
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from scipy import stats

from analysis.load import completed, find_run_dirs, valid_records
from rsd.core.sampling import probs_from_logits
from rsd.data import load_examples
from rsd.harness.prompts import prepare_prompts
from rsd.harness.schema import Dataset, stored_blocks
from rsd.models.pairs import ModelPair, load_pair

FALSE_ALARM = 1e-3


@dataclass(frozen=True)
class Calibration:
    """KS p-value of the PITs and the log-likelihood z-score over a run's generated tokens."""

    run_dir: str
    tokens: int
    ks_p: float
    z: float

    @property
    def passed(self) -> bool:
        return self.ks_p >= FALSE_ALARM and abs(self.z) <= stats.norm.isf(FALSE_ALARM / 2)


@torch.inference_mode()
def token_statistics(q: torch.Tensor, tokens: list[int], gen: torch.Generator) -> tuple[list[float], float, float]:
    """PITs of `tokens` under the rows of q [T, V], and the sums of (log q(x) + H) and of Var[log q]."""
    q = q.double()
    order = q.argsort(dim=-1, descending=True)
    ranked = q.gather(-1, order)
    x = torch.tensor(tokens, device=q.device)
    rank = (order == x[:, None]).nonzero()[:, 1]
    before = torch.where(rank[:, None] > torch.arange(q.shape[-1], device=q.device), ranked, 0).sum(-1)
    mass = q.gather(-1, x[:, None])[:, 0]
    pits = before + torch.rand(len(tokens), generator=gen, dtype=torch.float64).to(q.device) * mass
    logq = torch.where(q > 0, q.log(), torch.zeros_like(q))
    entropy = -(q * logq).sum(-1)
    var = (q * logq**2).sum(-1) - entropy**2
    return pits.tolist(), float((mass.log() + entropy).sum()), float(var.sum())


def run_prompts(dataset: Dataset, prompt_ids: list[str], pair: ModelPair) -> dict[str, list[int]]:
    """{prompt id: the token ids the run decoded}: its prompts (evaluation or tuning ones, from the whole set) prepared
    as the runner prepares them, truncated to dataset.max_prompt_tokens."""
    by_id = {ex.id: ex for ex in load_examples(replace(dataset, num_prompts=None))}
    prepared, _ = prepare_prompts([by_id[i] for i in prompt_ids], pair.tokenizer, pair.chat,
                                  dataset.max_prompt_tokens)
    return {ex.id: ids for ex, ids in prepared}


def calibrate_run(run_dir: Path, pair: ModelPair | None = None) -> Calibration:
    """Recompute q along every recorded sequence of a completed run and test the tokens against it."""
    summary = json.loads((run_dir / "summary.json").read_text())
    pair_cfg, dataset, sampling = stored_blocks(summary["config"])
    pair = pair or load_pair(pair_cfg, need_draft=False)
    params = sampling.params
    prompts = run_prompts(dataset, summary["prompt_ids"], pair)
    gen = torch.Generator().manual_seed(0)
    pits, num, var = [], 0.0, 0.0
    for record in valid_records(run_dir / "records.jsonl"):
        ids, new = prompts[record["prompt_id"]], record["new_token_ids"]
        if not new:
            continue
        with torch.inference_mode():
            logits = pair.target.model(input_ids=torch.tensor([ids + new], device=pair.target.device)).logits[0]
        q = probs_from_logits(logits[len(ids) - 1: len(ids) - 1 + len(new), : pair.vocab_size], params)
        p, n, v = token_statistics(q, new, gen)
        pits += p
        num += n
        var += v
    z = num / math.sqrt(var) if var > 0 else 0.0  # greedy runs: q is one-hot, every statistic is degenerate
    ks_p = float(stats.kstest(pits, "uniform").pvalue) if pits and var > 0 else 1.0
    return Calibration(str(run_dir), len(pits), ks_p, z)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.calibration", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", type=Path, help="directories searched recursively for run directories")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    results = [calibrate_run(d) for d in completed(find_run_dirs(args.inputs))]
    print(f"{'verdict':<8} {'tokens':>7} {'KS p':>7} {'z':>6}  run (false-alarm {FALSE_ALARM:g} per statistic)")
    for c in results:
        print(f"{'PASS' if c.passed else 'FAIL':<8} {c.tokens:>7} {c.ks_p:>7.3f} {c.z:>+6.2f}  {c.run_dir}")
    return 0 if all(c.passed for c in results) else 1


if __name__ == "__main__":
    sys.exit(main())
