"""Losslessness certificate for a drafter: `python -m rsd.certify drafter=NAME [overrides] [--samples N]`.

Runs (1) the exact whole-engine oracle: the real engine, the drafter's own `build` (every draw through ctx.draws
enumerated) and its verifier's own `verify`, on table models over a 3-token vocabulary whose laws depend on the whole
context, through several steps with EOS and max_new_tokens cuts, against the target's law to 1e-12; (2) the
exact-enumeration oracle under the drafter's declared candidate scheme (the node rule at one node, the verifier on
tiny drafted trees); (3) whole-engine Monte Carlo on table models whose draft is close to the target (deep levels are
reached; the acceptance by depth it exercised and its power against a planted bug are reported) and on a tiny
transformers pair (the real KV cache); (4) greedy identity against AR on tiny Llama and OPT pairs (and the embedded
pair with --embedded). Every step also checks the drafter's contract (depth <= ctx.max_depth, every drafted token
has mass under its parent's recorded law). Prints the measured distance, the bound, the false-alarm rate and the
samples used; exits 1 if any check fails, naming the check that caught it.

It then reports usefulness, which never changes the verdict: on the embedded SmolLM2 pair (the tiny pair when that is
unavailable), a few short prompts, the drafter's mean accepted length and block efficiency next to SD at the same L
and AR, with a WARNING when its acceptance is ~0 or it does not beat AR (--no-usefulness skips it).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException

from rsd.certify.chi_square import FALSE_ALARM
from rsd.certify.suite import certify
from rsd.certify.usefulness import USEFUL_PROMPTS, USEFUL_TOKENS
from rsd.drafters.base import Drafter
from rsd.errors import ConfigError, RsdError, one_line
from rsd.harness.config import resolve_config
from rsd.harness.runs import plan_runs
from rsd.paths import CONF_DIR


def compose_drafters(overrides: list[str]) -> list[tuple[str, Drafter]]:
    """The drafter(s) a Hydra override list names, at budget.draft_length=2 unless the overrides say otherwise."""
    defaults = ["model_pair=tiny_llama", "budget.draft_length=2"]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=defaults + overrides)
    except HydraException as err:
        raise ConfigError(str(err)) from None
    return [(plan.method, plan.make_drafter()) for plan in plan_runs(resolve_config(cfg))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rsd.certify", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. drafter=rsd_s drafter.beam_width=2")
    ap.add_argument("--samples", type=int, default=2000, help="Monte Carlo decodes per sampling setting")
    ap.add_argument("--table-samples", type=int, default=1000, help="Monte Carlo decodes on the table models")
    ap.add_argument("--embedded", action="store_true", help="also check greedy identity on the embedded pair")
    ap.add_argument("--no-usefulness", action="store_true",
                    help=f"skip the usefulness report ({USEFUL_PROMPTS} prompts x {USEFUL_TOKENS} tokens on the "
                         "embedded pair)")
    ap.add_argument("--json", type=Path, help="also write the certificate(s) as JSON here")
    args = ap.parse_args(argv)
    if args.samples < 100 or args.table_samples < 100:
        ap.error("--samples and --table-samples must be at least 100 (a chi-square test needs expected counts >= 5)")
    if args.json is not None and not args.json.parent.is_dir():
        ap.error(f"--json {args.json}: the directory {args.json.parent} does not exist")
    torch.set_num_threads(1)

    try:
        drafters = compose_drafters(args.overrides)
    except RsdError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - the drafter's own code (its constructor, its shapes) raised
        print(f"error: building the drafter raised {type(err).__name__}: {one_line(err)}", file=sys.stderr)
        return 2
    certificates = []
    for name, drafter in drafters:
        cert = certify(name, drafter, args.samples, embedded=args.embedded, usefulness=not args.no_usefulness,
                       table_samples=args.table_samples)
        print(cert.render(), flush=True)
        certificates.append(cert)
    if args.json:
        try:
            args.json.write_text(json.dumps([{**asdict(c), "passed": c.passed} for c in certificates], indent=2,
                                            default=str))
        except OSError as err:
            print(f"error: --json {args.json}: cannot write it ({err.strerror}); the certificate is printed above",
                  file=sys.stderr)
            return 2
    print(f"false-alarm rate per Monte Carlo check: {FALSE_ALARM:g}")
    return 0 if all(c.passed for c in certificates) else 1
