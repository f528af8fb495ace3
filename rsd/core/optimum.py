"""The optimum at a node (docs/algorithms.md#optimum): the largest probability that any lossless verifier accepts
one of a node's K candidates, for candidates drawn from the draft law p by a known scheme, against the target law q.

    alpha* = min over token sets H of [ q(H) + 1 - P(all K candidates in H) ]

The minimum is taken over the prefixes of the tokens sorted by p/q descending (q = 0 < p first). For 'single' and
'iid' candidates, P = p(H)^K and the prefix minimum is exact (one sort, two cumulative sums). For
'without_replacement' (Gumbel-top-K) candidates, P comes from the exponential race and is bracketed: see
`wor_optimum_bounds`. Pure functions of tensors; everything is computed in float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch

SCHEMES = ("single", "iid", "without_replacement")


def _normalised(dist: torch.Tensor) -> torch.Tensor:
    """A float64 CPU copy summing to 1 (a float32 law sums to 1 only to about 1e-6)."""
    dist = dist.detach().to("cpu", torch.float64)
    return dist / dist.sum()


def ratio_order(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Token indices by p/q descending (p, q: CPU float64, as `_normalised` gives): q = 0 < p first, tokens without
    draft mass last. The order among equal ratios is unspecified: it moves no run's end points. (In numpy: its sort
    is several times faster than torch's on CPU, and its small-array operations cost less.)"""
    p, q = p.numpy(), q.numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(q > 0, p / q, np.where(p > 0, math.inf, -1.0))
    return torch.from_numpy(np.argsort(-key))


def iid_optimum(p: torch.Tensor, q: torch.Tensor, k: int) -> float:
    """alpha* for k candidates drawn i.i.d. from p: min over sorted prefixes of Q + 1 - P^k (k = 1: 1 - TV(p, q))."""
    p, q = _normalised(p), _normalised(q)
    order = ratio_order(p, q)
    cum_p = p[order].cumsum(0).clamp(max=1.0)
    cum_q = q[order].cumsum(0)
    return float(min(1.0, float((cum_q + 1 - cum_p**k).min())))


def _groups(ps: torch.Tensor, qs: torch.Tensor, tau: float) -> torch.Tensor:
    """Group ids of the sorted tokens: runs that stay inside one tau-cell of both cumulative masses; a token with p or
    q mass >= tau is a group of its own."""
    big = (ps >= tau) | (qs >= tau)
    if bool(big.all()):
        return torch.arange(len(ps))
    cell = (ps.cumsum(0) / tau).floor() * (qs.numel() + 1) + (qs.cumsum(0) / tau).floor()
    start = torch.ones_like(big)
    start[1:] = (cell[1:] != cell[:-1]) | big[1:] | big[:-1]
    return start.long().cumsum(0) - 1


def _log_elementary(tm: torch.Tensor, bern: torch.Tensor, k: int) -> torch.Tensor:
    """log e_j(r_1..r_b) for j < k and every prefix b = 0..G [k, T, G+1], r_i = e^{tm_i} - 1 over the `bern` groups.

    e_j(r_1..r_b) = sum_{i <= b} r_i e_{j-1}(r_1..r_{i-1}): one cumulative sum per j. It is at most
    prod (1 + r_i) = e^{sum tm}, so rows with sum tm <= 700 fit float64 and use plain cumulative sums; the others
    use log-sum-exp ones (several times slower)."""
    tm = torch.where(bern[None, :], tm, 0.0)
    fits = tm.sum(1) <= 700
    out = tm.new_empty(k, tm.shape[0], tm.shape[1] + 1)
    r = torch.expm1(tm[fits])
    elem = [torch.ones(r.shape[0], r.shape[1] + 1, dtype=r.dtype)]
    for _ in range(1, k):
        elem.append(torch.cat([r.new_zeros(r.shape[0], 1), (r * elem[-1][:, :-1]).cumsum(1)], 1))
    out[:, fits] = torch.stack(elem).log()
    big = tm[~fits]
    # log(exp(x) - 1), stably for small and large x
    log_r = torch.where(big > 1, big + torch.log1p(-torch.exp(-big)), torch.log(torch.expm1(big).clamp_min(1e-300)))
    log_r = torch.where(big > 0, log_r, -math.inf)
    elem = [big.new_zeros(big.shape[0], big.shape[1] + 1)]
    for _ in range(1, k):
        terms = log_r + elem[-1][:, :-1]
        elem.append(torch.cat([big.new_full((big.shape[0], 1), -math.inf), torch.logcumsumexp(terms, 1)], 1))
    out[:, ~fits] = torch.stack(elem)
    return out


def _race_probs(mass: torch.Tensor, poisson: torch.Tensor, k: int, t: torch.Tensor) -> torch.Tensor:
    """log P[N_b(t) = j] for j < k [k, T, G+1]: N_b(t) counts arrivals by time t of the first b groups, a group
    arriving once (Bernoulli(1 - exp(-m t))) or, where `poisson`, as a Poisson(m t) count."""
    tm = t[:, None] * mass[None, :]  # [T, G]
    zero_col = torch.zeros(t.numel(), 1, dtype=t.dtype)
    elem = _log_elementary(tm, ~poisson, k)  # over the prefix's Bernoulli groups
    s_t = torch.cat([zero_col, tm.cumsum(1)], 1)
    if not bool(poisson.any()):
        return elem - s_t
    mu_t = torch.cat([zero_col, (tm * poisson[None, :]).cumsum(1)], 1)  # Poisson rate x t of the prefix
    log_mu_t = torch.log(mu_t.clamp_min(1e-300))
    out = []
    for j in range(k):
        parts = torch.stack([elem[i] + (j - i) * log_mu_t - math.lgamma(j - i + 1) for i in range(j + 1)])
        parts[:-1] = torch.where(mu_t > 0, parts[:-1], -math.inf)  # 0^0 = 1 only for i = j
        out.append(torch.logsumexp(parts, 0) - s_t)
    return torch.stack(out)


_TAIL = 1e-13  # the integral left out below and above the quadrature grid, at each end


def _grid(k: int, lam_min: float, step: float) -> torch.Tensor:
    """Nodes t, equally spaced in log t by `step`, from t_lo to t_hi: below t_lo the integrand is < t^k / k!
    (P[N >= k] <= (sum of rates x t)^k / k!), so it leaves out < t_lo^(k+1) / (k+1)! = _TAIL; above t_hi it is
    < lam e^{-lam t}, leaving out e^{-lam t_hi} <= _TAIL."""
    t_lo = math.exp((math.log(_TAIL) + math.lgamma(k + 2)) / (k + 1))
    t_hi = max(-math.log(_TAIL) / lam_min, t_lo)
    n = int(math.ceil(math.log(t_hi / t_lo) / step)) + 1
    return torch.exp(math.log(t_lo) + step * torch.arange(n, dtype=torch.float64))


def _all_in_h(mass: torch.Tensor, poisson: torch.Tensor, count: torch.Tensor, k: int, step: float,
              cols: torch.Tensor | None = None) -> torch.Tensor:
    """P(all k candidates in H_b) for the group prefixes b in `cols` (default all, 0..G) by the exponential race
    (`_race_probs`): the integral of lam e^{-lam t} P[N_b(t) >= k] dt with lam = 1 - p(H_b), by the trapezoid rule
    in log t with step `step` on `_grid` (exponentially convergent for this analytic integrand)."""
    cols = torch.arange(mass.numel() + 1) if cols is None else cols
    last = int(cols.max())
    mass, poisson = mass[:last], poisson[:last]
    cum = torch.cat([mass.new_zeros(1), mass.cumsum(0)])[cols]
    lam, count = (1 - cum).clamp_min(0), count[cols]
    integrate = (lam > _FULL) & (count >= k)  # else 0 (fewer than k tokens) or 1 (all the draft mass)
    value = (count >= k).to(lam.dtype)
    if not bool(integrate.any()):
        return value
    t = _grid(k, float(lam[integrate].min()), step)
    below = _race_probs(mass, poisson, k, t)[:, :, cols].exp().sum(0)  # P[N_b(t) < k], [T, cols]
    integrand = lam[None, :] * t[:, None] * torch.exp(-lam[None, :] * t[:, None]) * (1 - below).clamp(0, 1)
    integral = step * (integrand.sum(0) - 0.5 * (integrand[0] + integrand[-1]))
    return torch.where(integrate, integral.clamp(0, 1), value)


_FULL = 1e-15  # H holding all but this much draft mass: every candidate is in H once H has k tokens


def _product_bound(cum_p: torch.Tensor, cum_q: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """Q + 1 - prod_j (P - M_j) / (1 - M_j) at each prefix; `top` holds M_0 = 0, ..., M_{k-1} (M_j: the sum of the j
    largest draft masses)."""
    draws = ((cum_p[:, None] - top[None, :]) / (1 - top[None, :]).clamp_min(1e-300)).clamp(0, 1)
    return cum_q + 1 - draws.prod(1)


def _prepare(p: torch.Tensor, q: torch.Tensor, k: int, tau: float):
    """Sorted, grouped laws over the prefixes that can hold the minimum, and a cheap upper bound on it.

    Without replacement, P(C in H) lies between prod_j (p(H) - M_j) / (1 - M_j) (M_j: the j largest draft masses;
    each draw removes at most that much) and p(H)^k (the i.i.d. value). The lower one gives an attained bound U;
    only prefixes whose i.i.d. value Q + 1 - P^k is <= U can hold the minimum. (The bound, never below the i.i.d.
    value, is evaluated only where that is below the bound at the i.i.d. minimiser: the same U.) Returns (group p
    mass, group q mass, group sizes, U, the group prefixes 1..G that can hold the minimum), the groups covering the
    tokens up to the last such prefix, or None if the empty set is optimal.
    """
    p, q = _normalised(p), _normalised(q)
    order = ratio_order(p, q)
    ps, qs = p[order], q[order]
    n = int((ps > 0).sum())  # tokens with draft mass come first; one without only adds q(H)
    ps, qs = ps[:n], qs[:n]
    cum_p, cum_q = ps.cumsum(0).clamp_(max=1.0), qs.cumsum(0)
    iid = torch.pow(cum_p, k).neg_().add_(cum_q).add_(1)
    top = torch.cat([ps.new_zeros(1), ps.topk(min(k - 1, n)).values.cumsum(0)])
    best = int(iid.argmin())
    bound = min(1.0, float(_product_bound(cum_p[best:best + 1], cum_q[best:best + 1], top)))
    if bound >= 1.0 and float(iid[best]) >= 1.0:
        return None
    cand = (iid <= bound + 1e-12).nonzero().squeeze(1)
    bound = min(bound, float(_product_bound(cum_p[cand], cum_q[cand], top).min()))
    useful = iid <= bound + 1e-12  # useful[i]: the prefix of i + 1 tokens
    last = int(useful.nonzero().max()) + 1
    ps, qs = ps[:last], qs[:last]
    gid = _groups(ps, qs, tau)
    n_groups = int(gid[-1]) + 1
    mass = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, gid, ps)
    gq = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, gid, qs)
    size = torch.zeros(n_groups, dtype=torch.long).index_add_(0, gid, torch.ones_like(gid))
    ends = size.cumsum(0) - 1  # the last token of each group (the last group's is useful)
    return mass, gq, size, bound, torch.arange(1, n_groups + 1)[useful[ends]]


def wor_optimum(p: torch.Tensor, q: torch.Tensor, k: int, tau: float = 1 / 1024, step: float = 0.25) -> float:
    """The upper end of `wor_optimum_bounds`: a valid bound on what any lossless verifier reaches, and the exact prefix
    optimum when no two tokens are pooled."""
    prepared = _prepare(p, q, k, tau)
    return 1.0 if prepared is None else _merged_minimum(prepared, k, step)[0]


def _merged_minimum(prepared: tuple, k: int, step: float) -> tuple[float, torch.Tensor]:
    """(the minimum over the useful group prefixes, groups merged, and U; P(all in H) at those prefixes)."""
    mass, gq, _, bound, cols = prepared
    cum_q = torch.cat([gq.new_zeros(1), gq.cumsum(0)])[cols]
    merged = _all_in_h(mass, torch.zeros(len(mass), dtype=torch.bool), torch.arange(len(mass) + 1), k, step, cols)
    return min(bound, float((cum_q + 1 - merged).min())), merged


def wor_optimum_bounds(p: torch.Tensor, q: torch.Tensor, k: int, tau: float = 1 / 1024, step: float = 0.25
                       ) -> tuple[float, float, float]:
    """(lower, upper, quadrature error estimate) of the minimum over sorted prefixes, k candidates drawn without
    replacement from p.

    The sorted tokens are cut into groups (`_groups`): a token of mass >= tau alone, smaller ones pooled. Merging a
    group into one token can only delay arrivals, and splitting it into a Poisson process can only hasten them, so
    `upper` (groups merged, evaluated at group boundaries) and `lower` (groups as Poisson counts, each group's
    prefixes bounded by its first Q and last P; never below the i.i.d. optimum) bracket the minimum. With no two
    tokens pooled they coincide. The error estimate is |I(step) - I(step / 2)| at its largest.
    """
    prepared = _prepare(p, q, k, tau)
    if prepared is None:
        return 1.0, 1.0, 0.0
    mass, gq, size, _, _ = prepared
    cum_q = torch.cat([gq.new_zeros(1), gq.cumsum(0)])
    (upper, merged), (_, merged_fine) = (_merged_minimum(prepared, k, h) for h in (step, step / 2))
    tokens = torch.cat([size.new_zeros(1), size.cumsum(0)])
    split, split_fine = (_all_in_h(mass, size > 1, tokens, k, h) for h in (step, step / 2))
    within = torch.where(size > 1, cum_q[:-1] + 1 - split[1:], math.inf)  # a prefix inside a group: its start's Q
    lower = max(float(torch.minimum((cum_q + 1 - split).min(), within.min())), iid_optimum(p, q, k))
    err = float(torch.maximum((merged - merged_fine).abs().max(), (split - split_fine).abs().max()))
    return min(lower, 1.0), min(upper, 1.0), err


def root_optimum(p: torch.Tensor, q: torch.Tensor, k: int, scheme: str | None) -> float:
    """alpha* at a node with k candidates drawn from p by `scheme` ('single', 'iid', 'without_replacement'); the
    upper end of the bracket for without-replacement draws; nan for an unknown scheme or no candidates."""
    if scheme not in SCHEMES or k < 1:
        return math.nan
    if scheme == "without_replacement" and k > 1:
        return wor_optimum(p, q, k)
    return iid_optimum(p, q, k)
