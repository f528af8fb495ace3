"""Planted drafter bugs: each one fails the certificate, and the certificate names the oracle that caught it."""

import pytest
import torch

import rsd.certify.monte_carlo
import rsd.core.coins
from rsd.certify import RootLawSD, certify, draw_helpers_check, engine_exact_check, table_monte_carlo_check
from rsd.certify.exact_engine import ContextTables, target_law
from rsd.core.gumbel import gumbel
from rsd.drafters import RSDC, RSDS, SD, SpecInfer, SpecTr


class ParentLawSD(SD):
    def build(self, tree, ctx):
        v = 0
        for _ in range(min(self.length, ctx.max_depth)):
            ctx.probs(tree, [v])
            v = tree.add_candidate(v, ctx.draws.one(tree.draft_probs[tree.parents[v] if v else 0]))


def parent_law_iid(cls):
    class ParentLaw(cls):
        def build(self, tree, ctx):
            at = [0] * self.k
            for _ in range(min(self.length, ctx.max_depth)):
                nodes = list(dict.fromkeys(at))
                for v, p in zip(nodes, ctx.probs(tree, nodes)):
                    law = tree.draft_probs[tree.parents[v]] if v else p
                    seqs = [s for s in range(self.k) if at[s] == v]
                    for s, token in zip(seqs, ctx.draws.iid(law, len(seqs))):
                        at[s] = tree.add_candidate(v, token, reuse=True)
    return ParentLaw


class ParentLawRSDC(RSDC):
    def build(self, tree, ctx):
        frontier = [0]
        for b in self.branching[: ctx.max_depth]:
            probs = ctx.probs(tree, frontier)
            laws = torch.stack([tree.draft_probs[tree.parents[v]] if v else p for v, p in zip(frontier, probs)])
            frontier = [tree.add_candidate(v, t) for v, ts in zip(frontier, ctx.draws.without_replacement(laws, b))
                        for t in ts]


class SortedSiblingsRSDC(RSDC):
    """Siblings re-ordered by token id: the RSD rule needs them in draw order."""

    def build(self, tree, ctx):
        frontier = [0]
        for b in self.branching[: ctx.max_depth]:
            draws = ctx.draws.without_replacement(ctx.probs(tree, frontier), b)
            frontier = [tree.add_candidate(v, t) for v, ts in zip(frontier, draws) for t in sorted(ts)]


class RootLawRSDS(RSDS):
    def build(self, tree, ctx):
        beams = [0]
        phi = torch.zeros(1, dtype=torch.float64)
        key = torch.zeros(1, dtype=torch.float64)
        for _ in range(min(self.length, ctx.max_depth)):
            ctx.probs(tree, beams)
            logp = torch.stack([tree.draft_probs[0]] * len(beams)).log()
            parent, token, phi, key = ctx.draws.beam_step(phi, key, logp, self.width)
            beams = [tree.add_candidate(beams[b], t) for b, t in zip(parent.tolist(), token.tolist())]


class SortedBeamsRSDS(RSDS):
    """Kept beams re-ordered by token id before they become candidates."""

    def build(self, tree, ctx):
        beams = [0]
        phi = torch.zeros(1, dtype=torch.float64)
        key = torch.zeros(1, dtype=torch.float64)
        for _ in range(min(self.length, ctx.max_depth)):
            parent, token, phi, key = ctx.draws.beam_step(phi, key, ctx.probs(tree, beams).log(), self.width)
            order = sorted(range(len(token)), key=lambda i: (int(parent[i]), int(token[i])))
            parent, token, phi, key = parent[order], token[order], phi[order], key[order]
            beams = [tree.add_candidate(beams[b], t) for b, t in zip(parent.tolist(), token.tolist())]


class DeepSD(SD):
    """Ignores ctx.max_depth (drafts past the end of the generation)."""

    def build(self, tree, ctx):
        v = 0
        for _ in range(self.length):
            v = tree.add_candidate(v, ctx.draws.one(ctx.probs(tree, [v])[0]))


LAW_BUGS = {
    "sd root law": RootLawSD(2), "sd parent law": ParentLawSD(2),
    "specinfer parent law": parent_law_iid(SpecInfer)(2, 2), "spectr parent law": parent_law_iid(SpecTr)(2, 2),
    "rsd_c parent law": ParentLawRSDC([2, 1]), "rsd_c sorted siblings": SortedSiblingsRSDC([2, 2]),
    "rsd_s root law": RootLawRSDS(2, 2), "rsd_s sorted beams": SortedBeamsRSDS(2, 2),
}


@pytest.mark.parametrize("bug", sorted(LAW_BUGS))
def test_exact_engine_oracle_catches_drafter_law_bugs(bug, first_engine_case):
    torch.set_num_threads(1)
    check = engine_exact_check(LAW_BUGS[bug])
    assert check.passed is False, check.summary


@pytest.mark.parametrize("length", [1, 4])
def test_drafting_past_max_depth_breaks_the_contract(length):
    """At L = 1 the engine never asks for fewer levels than L (a step with no level left drafts nothing), so only
    the direct probe of every ctx.max_depth below L catches it."""
    check = engine_exact_check(DeepSD(length))
    assert check.passed is False and "max_depth" in check.summary


def _gumbel_topk_without_logp(probs, k, gen):
    keys = gumbel(probs.shape, gen, probs.device).masked_fill(probs <= 0, float("-inf"))
    top = keys.topk(min(k, probs.shape[-1]), dim=-1)
    return [row[torch.isfinite(val)].tolist() for val, row in zip(top.values, top.indices)]


def _sbs_step_without_shift(phi, key, logp, width, gen):
    g = phi[:, None] + logp.double() + gumbel(logp.shape, gen, logp.device)
    top = g.flatten().topk(min(width, g.numel()))
    keep = torch.isfinite(top.values)
    flat = top.indices[keep]
    parent, token = flat // g.shape[-1], flat % g.shape[-1]
    return parent, token, (phi[:, None] + logp.double())[parent, token], top.values[keep]


# The certificate draws 20,000 samples per experiment; the tests draw 4,000, where both planted helpers below already
# give p < 1e-300 (a beam search sample costs two production beam steps, ~0.7 ms).
TEST_SAMPLES = 4000


def test_draw_helpers_pass():
    torch.set_num_threads(1)
    assert draw_helpers_check(TEST_SAMPLES).passed


@pytest.mark.parametrize("helper, broken", [("gumbel_topk", _gumbel_topk_without_logp),
                                            ("sbs_step", _sbs_step_without_shift)])
def test_draw_helper_check_catches_broken_helpers(monkeypatch, helper, broken):
    """A bug inside a production draw helper is invisible to the exact oracle (which enumerates the ideal law); the
    helpers' own check against the enumerated law catches it."""
    torch.set_num_threads(1)
    monkeypatch.setattr(rsd.core.coins, helper, broken)
    check = draw_helpers_check(TEST_SAMPLES)
    assert check.passed is False, check.summary


def test_table_monte_carlo_catches_a_gumbel_key_without_logp(monkeypatch):
    """The whole engine with production draws sees it too. The power it reports (against the planted SD bug, whose
    exact law takes a minute or two to enumerate) is not the verdict: here it is computed against the target law
    itself; the slow full certificates compute it for real."""
    torch.set_num_threads(1)
    monkeypatch.setattr(rsd.certify.monte_carlo, "planted_sd_law", lambda vocab, seed, params, length: target_law(
        ContextTables(vocab, seed, "close"), params, [0], length, frozenset()))
    monkeypatch.setattr(rsd.core.coins, "gumbel_topk", _gumbel_topk_without_logp)
    drafter = RSDC([2, 1])
    assert engine_exact_check(drafter).passed is True
    check = table_monte_carlo_check(drafter, 400)
    assert check.passed is False, check.summary


@pytest.mark.slow
def test_full_certificate_fails_and_names_the_oracle():
    bug = "sd root law"
    cert = certify(bug, LAW_BUGS[bug], samples=1000, sampling=())
    assert not cert.passed
    assert "FAIL  exact engine" in cert.render()
