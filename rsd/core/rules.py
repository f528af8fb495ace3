"""Node rules (docs/algorithms.md#node-rules): how one tree node's ordered candidate children are verified.

A rule is a pure function `rule(q, p, candidates) -> NodeLaw`. `q` is the target's processed distribution at the
node, `p` the exact draft distribution the candidates were drawn from, `candidates` the ordered candidate tokens.
The law says: given candidates 1..j-1 were rejected, candidate j is accepted with probability
`NodeLaw.accept_probs()[j]` = min(1, num[j] / den[j]); if every candidate is rejected, the emitted token is drawn
from `residual`. Every acceptance probability is a deterministic function of (q, p, candidates), which is what
lets the exact-enumeration oracle (rsd.certify.outcomes) enumerate a rule without sampling.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from rsd.core.coins import first_outcome
from rsd.registry import RULES, lookup

if TYPE_CHECKING:
    from rsd.core.coins import Coins


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


def normalised(dist: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """dist / sum(dist), or `fallback` when dist has no mass; decided on the device (no host read)."""
    total = dist.sum()
    return torch.where(total > 0, dist / torch.where(total > 0, total, 1), fallback)


def residual(target: torch.Tensor, proposal: torch.Tensor) -> torch.Tensor:
    """norm((target - proposal)+), or `target` when the difference has no mass (docs/algorithms.md#rejection-step)."""
    return normalised((target - proposal).clamp_min(0), target)


def _drop(dist: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """Zero one token and renormalise (left unnormalised when nothing remains)."""
    dist = dist.clone()
    dist[token] = 0
    return normalised(dist, dist)


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


def kseq_rho(q: torch.Tensor, p: torch.Tensor, k: int) -> torch.Tensor:
    """Root rho* of f(rho) = 1 - (1 - beta(rho))^k - rho * beta(rho) on [1, k], returned as the upper end of a
    final bracket (f <= 0) no wider than float64 rounding, rounded up to q's dtype.

    beta(rho) = sum_x min(p(x), q(x)/rho) is A + C/rho between consecutive breakpoints t_x = q(x)/p(x) (A: the p
    mass of tokens with t_x >= rho, C: the q mass of those below). So f is evaluated at every breakpoint in (1, k)
    at once (one sort, two cumulative sums), which finds the segment holding the root; there f has closed-form
    coefficients and a scalar bisection finishes it. f is decreasing with f(1) >= 0 >= f(k), and any rho >= rho*
    keeps K-SEQ exact (docs/algorithms.md#kseq), hence the upper end and the upward rounding.
    """
    if k <= 1:
        return torch.ones((), dtype=q.dtype, device=q.device)
    qd, pd = q.double(), p.double()
    pos = pd > 0
    t = torch.where(pos, qd / pd.clamp_min(1e-300), torch.zeros_like(qd))
    below = pos & (t <= 1)  # contribute q/rho on all of [1, k]
    above = pos & (t >= k)  # contribute p on all of [1, k]
    mid = pos & ~below & ~above
    # Every vocabulary entry is sorted (a static shape, no host read): entries outside `mid` become massless
    # breakpoints at k, after the real ones, where beta and f equal their values at k.
    ts, order = torch.where(mid, t, float(k)).sort()
    qs, ps = torch.where(mid, qd, 0)[order], torch.where(mid, pd, 0)[order]
    c0, a0 = torch.where(below, qd, 0).sum(), torch.where(above, pd, 0).sum()
    # breakpoints b_0 = 1, b_i = ts[i-1], b_{m+1} = k; on [b_i, b_{i+1}] beta = A_i + C_i / rho, with
    # A_i = a0 + sum(ps[i:]) and C_i = c0 + sum(qs[:i]) (i = 0..m).
    zero = qd.new_zeros(1)
    a = a0 + torch.cat([ps.flip(0).cumsum(0).flip(0), zero])
    c = c0 + torch.cat([zero, qs.cumsum(0)])
    b = torch.cat([qd.new_ones(1), ts, qd.new_full((1,), float(k))])
    beta = torch.cat([a, a[-1:]]) + torch.cat([c, c[-1:]]) / b  # beta at each breakpoint (continuous there)
    f = 1 - (1 - beta) ** k - b * beta
    j = (f <= 0).to(torch.uint8).argmax()  # the first breakpoint with f <= 0 (f(k) <= 0 always)
    before = (j - 1).clamp_min(0)
    j, lo, hi, a_seg, c_seg = torch.stack([j.double(), b[before], b[j], a[before], c[before]]).tolist()  # one read
    if j == 0:
        return torch.ones((), dtype=q.dtype, device=q.device)

    def g(rho: float) -> float:
        beta = a_seg + c_seg / rho
        return 1 - (1 - beta) ** k - rho * beta

    while True:
        mid_rho = 0.5 * (lo + hi)
        if not lo < mid_rho < hi:
            break
        if g(mid_rho) <= 0:
            hi = mid_rho
        else:
            lo = mid_rho
    return torch.tensor(_round_up(hi, q.dtype), dtype=q.dtype, device=q.device)


def _round_up(x: float, dtype: torch.dtype) -> float:
    """The least value of `dtype` >= x, computed on the host: never round rho below the root (rho >= rho* is what
    keeps the rule exact)."""
    if dtype == torch.float64:
        return x
    if dtype == torch.float32:
        r = np.float32(x)
        return float(r if float(r) >= x else np.nextafter(r, np.float32(np.inf)))
    r = torch.tensor(x, dtype=dtype)
    return float(r if float(r) >= x else torch.nextafter(r, torch.tensor(float("inf"), dtype=dtype)))


def kseq_rule(q: torch.Tensor, p: torch.Tensor, candidates: torch.Tensor) -> NodeLaw:
    """SpecTr's K-SEQ for k = len(candidates) i.i.d. candidates: each tried against q / rho*, one shared residual."""
    k = len(candidates)
    rho = kseq_rho(q, p, k)
    kept = torch.minimum(p, q / rho)
    beta = kept.sum()
    # gamma <= rho for rho >= rho*, so the residual is exact even though rho* is rounded (docs/algorithms.md#kseq).
    gamma = torch.where(beta > 0, (1 - (1 - beta) ** k) / torch.where(beta > 0, beta, 1), 0)
    res = normalised((q - gamma * kept).clamp_min(0), q)
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
        r = torch.where(r.sum() == 0, q, r)
    return NodeLaw(torch.stack(num), torch.stack(den), r)


def get_rule(rule: str | NodeRule) -> NodeRule:
    """A rule by name (rsd.registry.RULES, or a user's dotted path), or the callable itself (a user drafter may
    supply its own), run in float32 or wider."""
    if isinstance(rule, str):
        return _named_rule(rule)
    if not callable(rule):
        rule = lookup(RULES, rule)
    return functools.partial(_at_least_float32, rule)


@functools.cache
def _named_rule(name: str) -> NodeRule:
    """A registered rule resolved once (get_rule runs at every verified node)."""
    return functools.partial(_at_least_float32, lookup(RULES, name))


def _at_least_float32(rule: NodeRule, q: torch.Tensor, p: torch.Tensor, candidates: torch.Tensor) -> NodeLaw:
    """Half-precision laws (a float16/bfloat16 model) would round ratios and residuals: upcast, never downcast."""
    dtype = torch.promote_types(torch.promote_types(q.dtype, p.dtype), torch.float32)
    return rule(q.to(dtype), p.to(dtype), candidates)


def verify_node(rule: str | NodeRule, q: torch.Tensor, p: torch.Tensor, candidates: torch.Tensor | Sequence[int],
                coins: "Coins") -> tuple[int, int]:
    """Apply a rule: (index of the accepted candidate, token), or (-1, residual token) if all are rejected.

    Candidate j (the earlier ones rejected) is accepted iff `coins.accept(law.accept_probs()[j])`: the one definition
    of acceptance, shared with the exact oracles (a zero-mass/zero-mass candidate is never accepted). Candidates given
    as a list of ints cost no host read for the token.
    """
    law = get_rule(rule)(q, p, torch.as_tensor(candidates, device=q.device))
    j = first_outcome(coins, law.accept_probs(), True)
    if j < len(candidates):
        return j, int(candidates[j])
    return -1, coins.draw(law.residual)


def verify_chain(rule: str | NodeRule, q: torch.Tensor, p: torch.Tensor, tokens: Sequence[int], coins: "Coins"
                 ) -> tuple[int, int | None]:
    """`verify_node` down a chain whose node i has the single candidate tokens[i] (q, p: [len(tokens), V]), with the
    same coins in the same order: (number accepted, the residual token at the first rejection or None)."""
    rule = get_rule(rule)
    laws = [rule(q[i], p[i], torch.tensor([t], device=q.device)) for i, t in enumerate(tokens)]
    n = first_outcome(coins, torch.cat([law.accept_probs() for law in laws]), False)
    return n, (coins.draw(laws[n].residual) if n < len(tokens) else None)
