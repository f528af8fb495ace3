"""Losslessness certificate for a drafter: `python -m rsd.certify drafter=NAME [overrides] [--samples N]`.

Runs (1) the exact-enumeration oracle under its declared candidate scheme, driving the engine's own verification
code (the node rule at one node, and the drafter's verifier on every tiny drafted tree), (2) the whole-engine
Monte Carlo oracle on a tiny-vocabulary model pair (first 3 tokens against the exactly enumerated target law), and
(3) greedy identity against AR on tiny Llama and OPT pairs (and the embedded pair with --embedded). Prints the
measured distance, the bound, the false-alarm rate and the samples used; exits 1 if any check fails.

It then reports usefulness, which never changes the verdict: on the embedded SmolLM2 pair (the tiny pair when that is
unavailable), a few short prompts, the drafter's mean accepted length and block efficiency next to SD at the same L
and AR, with a WARNING when its acceptance is ~0 or it does not beat AR (--no-usefulness skips it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from rsd.drafters.base import Drafter
from rsd.oracles import (
    FALSE_ALARM,
    LAW_KINDS,
    PrefixLaws,
    draft_chain,
    draft_iid_trie,
    draft_without_replacement,
    engine_monte_carlo,
    node_output_law,
    tree_law_error,
)
from rsd.sampling import SamplingParams, prompt_generator
from rsd.verify import verifier_for

EXACT_BOUND = 1e-12
# T=2 with top-k and top-p keeps many sequences alive while both filters bite (a check with power, not 4 cells).
MC_SAMPLING = (SamplingParams(1.0), SamplingParams(2.0, top_k=4, top_p=0.95))
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


@dataclass
class Check:
    """One oracle's verdict, with the measured quantity and its bound."""

    name: str
    passed: bool | None  # None: not applicable
    summary: str
    details: dict = field(default_factory=dict)


@dataclass
class Usefulness:
    """How much a drafter helps on a real pair (reported next to the verdict, never part of it)."""

    setting: str  # the pair, prompts, tokens, sampling and L the numbers were measured on
    rows: dict[str, dict[str, float]]  # method -> mean_accepted_length, block_efficiency
    warning: str | None

    def render(self) -> str:
        lines = [f"Usefulness (reported only, not part of the verdict): {self.setting}",
                 f"  {'method':<16} {'mean accepted length':>20} {'block efficiency':>17}"]
        for method, row in self.rows.items():
            lines.append(f"  {method:<16} {row['mean_accepted_length']:>20.2f} {row['block_efficiency']:>17.2f}")
        if self.warning:
            lines.append(f"WARNING: {self.warning}")
        return "\n".join(lines)


@dataclass
class Certificate:
    drafter: str
    shape: dict
    rule: str
    checks: list[Check]
    verifier: str = "walk"
    usefulness: Usefulness | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed is not False for c in self.checks)

    def render(self) -> str:
        lines = [f"Losslessness certificate: drafter {self.drafter}, shape {self.shape}, node rule {self.rule}, "
                 f"verifier {self.verifier}"]
        for c in self.checks:
            verdict = {True: "PASS", False: "FAIL", None: "n/a "}[c.passed]
            lines.append(f"  {verdict}  {c.name:<22} {c.summary}")
        lines.append(f"RESULT: {'PASS' if self.passed else 'FAIL'}")
        if self.usefulness is not None:
            lines.append(self.usefulness.render())
        return "\n".join(lines)


def random_laws(vocab: int, seed: int, support: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A peaked target q and a different draft p in float64; p optionally restricted to `support` tokens."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.softmax(2.0 * torch.randn(vocab, generator=gen, dtype=torch.float64), -1)
    p = torch.softmax(2.0 * torch.randn(vocab, generator=gen, dtype=torch.float64), -1)
    if support is not None:
        p[p.argsort()[: vocab - support]] = 0
        p = p / p.sum()
    return q, p


def node_exact_error(drafter: Drafter, scheme: str) -> tuple[float, int]:
    """Max |law - q| of one node's output under the drafter's rule, through `verify_node` (the walk's code)."""
    cases = []
    for m in ([1] if scheme == "single" else [1, 2, 3, 4]):
        vocab = 8 if m <= 3 else 6
        for seed in range(3):
            cases.append((m, *random_laws(vocab, seed)))
        cases.append((m, *random_laws(vocab, 100 + m, support=2)))  # fewer draft tokens than candidates
    for hot_q, hot_p in ((0, 0), (0, 1)):  # greedy: one-hot laws, equal and different
        q, p = torch.zeros(5, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)
        q[hot_q], p[hot_p] = 1.0, 1.0
        cases.append((1 if scheme == "single" else 2, q, p))
    worst = max(float((node_output_law(drafter.rule, q, p, m, scheme) - q).abs().max()) for m, q, p in cases)
    return worst, len(cases)


def tree_drafts(scheme: str, rule: Any) -> list[Callable]:
    """Tiny trees (depth 2-3) drafted by the scheme, for the tree-level enumeration."""
    if scheme == "single":
        return [partial(draft_chain, length=2, rule=rule), partial(draft_chain, length=3, rule=rule)]
    if scheme == "without_replacement":
        return [partial(draft_without_replacement, branching=[2, 2], rule=rule),
                partial(draft_without_replacement, branching=[3, 1], rule=rule)]
    if scheme == "iid":
        return [partial(draft_iid_trie, k=2, length=2, rule=rule)]
    return []


def tree_exact_error(drafter: Drafter, scheme: str, vocab: int = 3) -> tuple[float, int]:
    """Max total-variation distance between the target's joint law and (draft a tiny tree by the scheme, verify it
    with the drafter's verifier, complete with target samples), over law kinds (peaked, truncated, one-hot,
    disjoint supports), seeds, and one case with an EOS token."""
    verifier = verifier_for(drafter)
    worst, cases = 0.0, 0
    for draft in tree_drafts(scheme, drafter.rule):
        depth = draft.keywords["length"] if "length" in draft.keywords else len(draft.keywords["branching"])
        for kind, seed, eos in [(k, s, frozenset()) for k in LAW_KINDS for s in (0, 1)] + [("random", 2, {0})]:
            worst = max(worst, tree_law_error(verifier, PrefixLaws(vocab, seed, kind), draft, depth + 1,
                                              frozenset(eos)))
            cases += 1
    return worst, cases


def exact_check(drafter: Drafter) -> Check:
    """Exact enumeration through the engine's own verification code: every candidate draw and every coin of the
    node rule at one node (walk verifiers), and every drafted tiny tree with every coin of the drafter's verifier."""
    scheme = getattr(drafter, "candidate_scheme", None)
    if scheme is None:
        return Check("exact enumeration", None, "not applicable: the drafter declares no candidate_scheme "
                     "(the Monte Carlo oracle still covers it)")
    parts, details = [], {"bound": EXACT_BOUND, "scheme": scheme}
    passed = True
    if drafter.verifier == "walk":
        err, n = node_exact_error(drafter, scheme)
        parts.append(f"node: max |law - q| = {err:.2e} ({n} nodes, vocab <= 8, m <= 4)")
        details.update(node_max_abs_error=err, node_cases=n)
        passed &= err <= EXACT_BOUND
    if tree_drafts(scheme, drafter.rule):
        err, n = tree_exact_error(drafter, scheme)
        parts.append(f"trees: max TV = {err:.2e} ({n} cases, vocab 3, depth 2-3, verifier {drafter.verifier})")
        details.update(tree_max_tv=err, tree_cases=n)
        passed &= err <= EXACT_BOUND
    return Check("exact enumeration", passed, "; ".join(parts) + f"; bound {EXACT_BOUND:.0e}, scheme {scheme}",
                 details)


def monte_carlo_check(drafter: Drafter, params: SamplingParams, samples: int, seed: int = 0) -> Check:
    """Whole engine on a tiny vocabulary-8 Llama pair: law of the first 3 tokens vs the exact target law."""
    from rsd.models.tiny import tiny_pair

    target, draft = tiny_pair("llama", 8, seed=seed, init_std=0.3)
    res = engine_monte_carlo(target, draft, drafter, params, [3, 4, 5], 3, samples, seed)
    name = f"Monte Carlo T={params.temperature:g}" + (f" k={params.top_k}" if params.top_k else "") + (
        f" p={params.top_p:g}" if params.top_p < 1 else "")
    return Check(name, res.passed,
                 f"chi2 = {res.chi2:.1f} vs critical {res.critical:.1f} ({res.cells} cells, false-alarm "
                 f"{res.false_alarm:g}), p = {res.p_value:.3g}, TV = {res.tv:.4f}, samples {res.samples}",
                 asdict(res))


def greedy_pairs(embedded: bool) -> list[tuple[str, torch.nn.Module, torch.nn.Module, list[list[int]], list[int]]]:
    """(name, target, draft, prompts, eos) for greedy identity: tiny pairs with an independent and a copied draft."""
    from rsd.models.tiny import tiny_pair

    pairs = []
    for arch in ("llama", "opt"):
        target, draft = tiny_pair(arch, 64, seed=3)
        prompts = [[5, 9, 2], [17, 3, 40, 41, 8], [60]]
        pairs.append((f"tiny {arch}", target, draft, prompts, []))
        pairs.append((f"tiny {arch}, draft = target", target, target, prompts, []))
    if embedded:
        from rsd.data import load_builtin
        from rsd.models.pairs import load_pair

        pair = load_pair({"name": "smollm2", "target": "embedded:smollm2-135m-instruct",
                          "draft": "embedded:smollm2-draft", "chat": True})
        prompts = [pair.encode_prompt(load_builtin(n)[0].prompt) for n in ("dolly_builtin", "xsum_builtin")]
        pairs.append(("embedded smollm2", pair.target.model, pair.draft.model, prompts, pair.eos_token_ids))
    return pairs


def greedy_check(drafter: Drafter, embedded: bool, max_new_tokens: int = 24) -> Check:
    """At temperature 0 the drafter's output equals AR's token for token."""
    from rsd.drafters import AR
    from rsd.engine import Engine
    from rsd.models.adapter import CausalLM

    greedy = SamplingParams(0.0)
    total, equal, mismatches = 0, 0, []
    for name, target, draft, prompts, eos in greedy_pairs(embedded):
        vocab = min(target.get_output_embeddings().weight.shape[0], draft.get_output_embeddings().weight.shape[0])
        ar = Engine(CausalLM(target), None, AR(), greedy, eos, vocab)
        spec = Engine(CausalLM(target), CausalLM(draft), drafter, greedy, eos, vocab)
        for i, prompt in enumerate(prompts):
            a = ar.generate(prompt, max_new_tokens, prompt_generator(0, str(i))).new_token_ids
            b = spec.generate(prompt, max_new_tokens, prompt_generator(0, str(i))).new_token_ids
            total += 1
            equal += a == b
            if a != b:
                mismatches.append(name)
    return Check("greedy identity", equal == total,
                 f"{equal}/{total} sequences equal to AR token for token ({max_new_tokens} tokens each)"
                 + (f"; mismatches on {sorted(set(mismatches))}" if mismatches else ""),
                 {"equal": equal, "total": total})


USEFUL_PROMPTS, USEFUL_TOKENS = 3, 24  # short on purpose: a smoke test of usefulness, not a benchmark
USELESS_ACCEPTANCE = 0.05  # mean accepted tokens per step below this is "~0"
AR_MARGIN = 1.05  # block efficiency below this does not beat AR (exactly 1 token per target call)


def _load_named_pair(name: str):
    """The model pair conf/model_pair/NAME.yaml describes."""
    from omegaconf import OmegaConf

    from rsd.models.pairs import load_pair

    return load_pair(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model_pair" / f"{name}.yaml")))


def usefulness_check(name: str, drafter: Drafter, model_pair: str = "smollm2", prompts: int = USEFUL_PROMPTS,
                     max_new_tokens: int = USEFUL_TOKENS) -> Usefulness | None:
    """Mean accepted length and block efficiency of `drafter`, SD at the same L and AR, at T = 1 on the first
    `prompts` dolly_builtin prompts; the tiny pair stands in when `model_pair` cannot be loaded. None for a drafter
    that drafts nothing. Metrics as defined in docs/algorithms.md#metrics."""
    from rsd.data import load_builtin
    from rsd.drafters import SD
    from rsd.engine import Engine
    from rsd.models.embedded import ModelUnavailableError

    depth = drafter.draft_length
    if depth == 0:
        return None
    try:
        pair, pair_note = _load_named_pair(model_pair), f"{model_pair} pair"
    except ModelUnavailableError as err:
        pair = _load_named_pair("tiny_llama")
        pair_note = (f"tiny_llama pair (random weights, says little about real models; {model_pair} is unavailable: "
                     f"{str(err).splitlines()[0]})")
    examples = load_builtin("dolly_builtin")[:prompts]
    sampling = SamplingParams(1.0)
    rows = {"ar": {"mean_accepted_length": 0.0, "block_efficiency": 1.0}}  # one token per call, by definition
    for method, d in ({f"sd (L={depth})": SD(depth), name: drafter}).items():
        engine = Engine(pair.target, pair.draft, d, sampling, pair.eos_token_ids, pair.vocab_size)
        outs = [engine.generate(pair.encode_prompt(ex.prompt), max_new_tokens,
                                prompt_generator(0, ex.id, pair.target.device)) for ex in examples]
        accepted = [a for out in outs for a in out.accepted_lengths]
        rows[method] = {"mean_accepted_length": sum(accepted) / len(accepted),
                        "block_efficiency": sum(len(o.new_token_ids) for o in outs) / sum(o.target_calls for o in outs)}
    mine = rows[name]
    problems = []
    if mine["mean_accepted_length"] < USELESS_ACCEPTANCE:
        problems.append(f"its acceptance is ~0 (mean accepted length {mine['mean_accepted_length']:.2f} tokens per "
                        "step): check that it drafts the tokens it means to")
    if mine["block_efficiency"] < AR_MARGIN:
        problems.append(f"it does not beat AR (block efficiency {mine['block_efficiency']:.2f} < {AR_MARGIN})")
    warning = f"{name} is lossless but useless here: " + "; ".join(problems) if problems else None
    setting = (f"{pair_note}, {len(examples)} dolly_builtin prompts x {max_new_tokens} new tokens, T=1, L={depth} "
               "(a short smoke test, not a benchmark)")
    return Usefulness(setting, rows, warning)


def certify(name: str, drafter: Drafter, samples: int = 2000, sampling: tuple[SamplingParams, ...] = MC_SAMPLING,
            embedded: bool = False, usefulness: bool = False) -> Certificate:
    """All three oracles for one drafter instance; with `usefulness`, also `usefulness_check` (never the verdict)."""
    checks = [exact_check(drafter)]
    checks += [monte_carlo_check(drafter, params, samples) for params in sampling]
    checks.append(greedy_check(drafter, embedded))
    rule = drafter.rule if isinstance(drafter.rule, str) else getattr(drafter.rule, "__name__", "custom")
    return Certificate(name, drafter.describe(), rule, checks, str(drafter.verifier),
                       usefulness_check(name, drafter) if usefulness else None)


def compose_drafters(overrides: list[str]) -> list[tuple[str, Drafter]]:
    """The drafter(s) a Hydra override list names, at budget.draft_length=2 unless the overrides say otherwise."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from rsd.errors import ConfigError
    from rsd.runner import plan_runs

    defaults = ["model_pair=tiny_llama", "budget.draft_length=2"]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=defaults + overrides)
    except HydraException as err:
        raise ConfigError(str(err)) from None
    return [(plan.method, plan.make_drafter()) for plan in plan_runs(cfg)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rsd.certify", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. drafter=rsd_s drafter.beam_width=2")
    ap.add_argument("--samples", type=int, default=2000, help="Monte Carlo decodes per sampling setting")
    ap.add_argument("--embedded", action="store_true", help="also check greedy identity on the embedded pair")
    ap.add_argument("--no-usefulness", action="store_true",
                    help=f"skip the usefulness report ({USEFUL_PROMPTS} prompts x {USEFUL_TOKENS} tokens on the "
                         "embedded pair)")
    ap.add_argument("--json", type=Path, help="also write the certificate(s) as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from rsd.errors import RsdError

    try:
        drafters = compose_drafters(args.overrides)
    except RsdError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    certificates = []
    for name, drafter in drafters:
        cert = certify(name, drafter, args.samples, embedded=args.embedded, usefulness=not args.no_usefulness)
        print(cert.render(), flush=True)
        certificates.append(cert)
    if args.json:
        args.json.write_text(json.dumps([{**asdict(c), "passed": c.passed} for c in certificates], indent=2,
                                        default=str))
    print(f"false-alarm rate per Monte Carlo check: {FALSE_ALARM:g}")
    return 0 if all(c.passed for c in certificates) else 1


if __name__ == "__main__":
    sys.exit(main())
