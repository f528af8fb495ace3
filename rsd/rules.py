"""Node rules (ALGORITHMS.md §1-2): how one tree node's ordered candidate children are verified.

A rule is a pure function `rule(q, p, candidates) -> NodeLaw`. `q` is the target's processed distribution at the
node, `p` the exact draft distribution the candidates were drawn from, `candidates` the ordered candidate tokens.
The law says: given candidates 1..j-1 were rejected, candidate j is accepted with probability
`NodeLaw.accept_probs()[j]` = min(1, num[j] / den[j]); if every candidate is rejected, the emitted token is drawn
from `residual`. Every acceptance probability is a deterministic function of (q, p, candidates), which is what
lets the exact-enumeration oracle (rsd.oracles) enumerate a rule without sampling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from rsd.verify.base import Coins


@dataclass(frozen=True)
class NodeLaw:
    """Acceptance of candidate j (given the earlier ones were rejected) is min(1, num[j] / den[j])."""

    num: torch.Tensor
    den: torch.Tensor
    residual: torch.Tensor

    def accept_probs(self) -> torch.Tensor:
        """min(1, num/den) per candidate, 0 where den is 0 and num is 0: the one definition of acceptance
        (`verify_node` and every oracle use it)."""
        return torch.where(self.den > 0, (self.num / self.den.clamp_min(1e-300)).clamp(max=1.0),
                           (self.num > 0).to(self.num.dtype))


NodeRule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], NodeLaw]


def residual(target: torch.Tensor, proposal: torch.Tensor) -> torch.Tensor:
    """norm((target - proposal)+), falling back to `target` when the difference has no mass (§1)."""
    diff = (target - proposal).clamp_min(0)
    total = diff.sum()
    return diff / total if total > 0 else target


def _drop(dist: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """Zero one token and renormalise (left unnormalised when nothing remains)."""
    dist = dist.clone()
    dist[token] = 0
    total = dist.sum()
    return dist / total if total > 0 else dist


def sd_rule(q: torch.Tensor, p: torch.Tensor, candidates: torch.Tensor) -> NodeLaw:
    """Speculative sampling with one candidate: accept w.p. min(1, q/p), else norm((q - p)+)."""
    if len(candidates) != 1:
        raise ValueError(f"the SD rule verifies exactly one candidate, got {len(candidates)}")
    return NodeLaw(q[candidates], p[candidates], residual(q, p))


def specinfer_rule(q: torch.Tensor, p: torch.Tensor, candidates: torch.Tensor) -> NodeLaw:
    """Multi-step speculative sampling for i.i.d. candidates: the target residual shrinks, `p` stays fixed."""
    r = q
    num, den = [], []
    for c in candidates:
        num.append(r[c])
        den.append(p[c])
        r = residual(r, p)
    return NodeLaw(torch.stack(num), torch.stack(den), r)


def kseq_rho(q: torch.Tensor, p: torch.Tensor, k: int, rounds: int = 6, points: int = 32) -> torch.Tensor:
    """Root of f(rho) = 1 - (1 - beta(rho))^k - rho * beta(rho) on [1, k]: the upper end of the final bracket.

    Multisection (bisection evaluating `points` values of rho per round in one tensor op): f is decreasing with
    f(1) >= 0 >= f(k), and any rho >= rho* keeps K-SEQ exact, so the bracket's upper end (f <= 0) is returned.
    """
    lo, hi = 1.0, float(k)
    for _ in range(rounds):
        rho = torch.linspace(lo, hi, points + 1, dtype=q.dtype, device=q.device)[1:]
        beta = torch.minimum(p[None], q[None] / rho[:, None]).sum(-1)
        f = 1 - (1 - beta) ** k - rho * beta
        first = int((f <= 0).nonzero()[0]) if bool((f <= 0).any()) else points - 1
        lo, hi = (lo if first == 0 else float(rho[first - 1])), float(rho[first])
    return torch.tensor(hi, dtype=q.dtype, device=q.device)


def kseq_rule(q: torch.Tensor, p: torch.Tensor, candidates: torch.Tensor) -> NodeLaw:
    """SpecTr's K-SEQ for k = len(candidates) i.i.d. candidates: each tried against q / rho*, one shared residual."""
    k = len(candidates)
    rho = kseq_rho(q, p, k)
    kept = torch.minimum(p, q / rho)
    beta = kept.sum()
    # gamma <= rho for rho >= rho*, so the residual is exact even though rho* is rounded (ALGORITHMS.md §2).
    gamma = (1 - (1 - beta) ** k) / beta if beta > 0 else torch.zeros((), dtype=q.dtype)
    res = (q - gamma * kept).clamp_min(0)
    res = res / res.sum() if res.sum() > 0 else q
    return NodeLaw(q[candidates], rho * p[candidates], res)


def rsd_rule(q: torch.Tensor, p: torch.Tensor, candidates: torch.Tensor) -> NodeLaw:
    """Recursive rejection sampling for candidates drawn without replacement, in draw order."""
    r, d = q, p
    num, den = [], []
    for c in candidates:
        num.append(r[c])
        den.append(d[c])
        r = residual(r, d)
        d = _drop(d, c)
    return NodeLaw(torch.stack(num), torch.stack(den), r)


def onehot_rule(q: torch.Tensor, p: torch.Tensor, candidates: torch.Tensor) -> NodeLaw:
    """Deterministic distinct candidates (a one-hot draft per candidate): accept c w.p. r(c), else drop it from r."""
    r = q
    num, den = [], []
    for c in candidates:
        num.append(r[c])
        den.append(torch.ones((), dtype=q.dtype))
        r = _drop(r, c)
        if r.sum() == 0:
            r = q
    return NodeLaw(torch.stack(num), torch.stack(den), r)


RULES: dict[str, NodeRule] = {
    "sd": sd_rule,
    "specinfer": specinfer_rule,
    "kseq": kseq_rule,
    "rsd": rsd_rule,
    "onehot": onehot_rule,
}


def get_rule(rule: str | NodeRule) -> NodeRule:
    """A rule by name, or the callable itself (a user drafter may supply its own)."""
    if callable(rule):
        return rule
    if rule not in RULES:
        raise KeyError(f"unknown node rule {rule!r}; known rules: {sorted(RULES)}")
    return RULES[rule]


def verify_node(rule: str | NodeRule, q: torch.Tensor, p: torch.Tensor, candidates: torch.Tensor,
                coins: "Coins") -> tuple[int, int]:
    """Apply a rule: (index of the accepted candidate, token), or (-1, residual token) if all are rejected.

    Candidate j (the earlier ones rejected) is accepted iff `coins.accept(law.accept_probs()[j])`: the one definition
    of acceptance, shared with the exact oracles (a zero-mass/zero-mass candidate is never accepted).
    """
    law = get_rule(rule)(q, p, candidates)
    for j, prob in enumerate(law.accept_probs().tolist()):
        if coins.accept(prob):
            return j, int(candidates[j])
    return -1, coins.draw(law.residual)
