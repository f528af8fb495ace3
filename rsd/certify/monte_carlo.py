"""Whole-engine Monte Carlo with the production draws: on close table models (the acceptance by depth exercised and
the power against a planted bug reported) and on a tiny transformers pair (the real KV cache)."""

from __future__ import annotations

from dataclasses import asdict
from functools import cache

from rsd.certify.chi_square import chi_square_power, chi_square_test, engine_monte_carlo
from rsd.certify.exact import T1, engine_for
from rsd.certify.exact_engine import ContextTables, TableLM, engine_law, target_law
from rsd.certify.report import Check
from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import SD
from rsd.drafters.base import Drafter
from rsd.drafters.contract import DrafterContractError
from rsd.models.tiny import tiny_pair

# T=2 with top-k and top-p keeps many sequences alive while both filters bite (a check with power, not 4 cells).
MC_SAMPLING = (SamplingParams(1.0), SamplingParams(2.0, top_k=4, top_p=0.95))


class RootLawSD(SD):
    """A planted bug: each node's law is computed, but the candidate is drawn from the root's (lossy from the second
    token of a step on). The stated alternative the table Monte Carlo check's power is reported against."""

    def build(self, tree, ctx):
        v = 0
        for _ in range(min(self.length, ctx.max_depth)):
            ctx.probs(tree, [v])
            v = tree.add_candidate(v, ctx.draws.one(tree.draft_probs[0]))


@cache  # a fixed law (a minute of enumeration), the same for every drafter certified in this process
def planted_sd_law(vocab: int, seed: int, params: SamplingParams, length: int) -> dict:
    """The exact law of RootLawSD(2) on the close tables ContextTables(vocab, seed)."""
    return engine_law(engine_for(RootLawSD(2), params, (), vocab), ContextTables(vocab, seed, "close"), [0], length)


def table_monte_carlo_check(drafter: Drafter, samples: int, params: SamplingParams = T1,
                            vocab: int = 4, length: int = 4, seed: int = 0) -> Check:
    """The engine with its production draws (the prompt's generator) on close table models: chi-square of the first
    `length` tokens against the exact target law, the acceptance by depth exercised, and the power at this sample
    size against the planted SD bug (second token from the root's law)."""
    tables = ContextTables(vocab, seed, "close")
    engine = Engine(TableLM(tables, 0), TableLM(tables, 1), drafter, params, [], vocab)
    counts: dict[tuple[int, ...], int] = {}
    reached: dict[int, int] = {}
    steps = 0
    try:
        for i in range(samples):
            out = engine.generate([0], length, prompt_generator(seed, f"table-mc-{i}"))
            counts[tuple(out.new_token_ids)] = counts.get(tuple(out.new_token_ids), 0) + 1
            steps += len(out.accepted_lengths)
            for a in out.accepted_lengths:
                for d in range(1, a + 1):
                    reached[d] = reached.get(d, 0) + 1
    except DrafterContractError as err:
        return Check("Monte Carlo tables", False, f"the drafter broke its contract: {err}")
    law = target_law(tables, params, [0], length, frozenset())
    res = chi_square_test(counts, law)
    power = chi_square_power(law, planted_sd_law(vocab, seed, params, length), samples)
    depth = {d: reached[d] / steps for d in sorted(reached)}
    depth_text = ", ".join(f"d{d} {f:.2f}" for d, f in depth.items()) or "none"
    return Check("Monte Carlo tables", res.passed,
                 f"chi2 = {res.chi2:.1f} vs critical {res.critical:.1f} ({res.cells} cells), p = {res.p_value:.3g}, "
                 f"samples {samples}; steps accepting >= d tokens: {depth_text}; power vs the planted SD "
                 f"root-law bug {power:.2f}",
                 {**asdict(res), "acceptance_by_depth": depth, "power_vs_planted_sd_bug": power})


def monte_carlo_check(drafter: Drafter, params: SamplingParams, samples: int, seed: int = 0) -> Check:
    """Whole engine on a tiny vocabulary-8 Llama pair: law of the first 3 tokens vs the exact target law."""
    target, draft = tiny_pair("llama", 8, seed=seed, init_std=0.3)
    res = engine_monte_carlo(target, draft, drafter, params, [3, 4, 5], 3, samples, seed)
    name = f"Monte Carlo T={params.temperature:g}" + (f" k={params.top_k}" if params.top_k else "") + (
        f" p={params.top_p:g}" if params.top_p < 1 else "")
    return Check(name, res.passed,
                 f"chi2 = {res.chi2:.1f} vs critical {res.critical:.1f} ({res.cells} cells, false-alarm "
                 f"{res.false_alarm:g}), p = {res.p_value:.3g}, TV = {res.tv:.4f}, samples {res.samples}",
                 asdict(res))
