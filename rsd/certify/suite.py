"""`certify`: every check for one drafter, each guarded so that an error raised by the drafter's code is that
check's FAIL, in one line."""

from __future__ import annotations

from collections.abc import Callable

from rsd.certify.draws import draw_helpers_check
from rsd.certify.enumeration import exact_check
from rsd.certify.exact import engine_exact_check, feature_exact_check
from rsd.certify.greedy import greedy_check
from rsd.certify.monte_carlo import MC_SAMPLING, monte_carlo_check, table_monte_carlo_check
from rsd.certify.report import Certificate, Check, raised_text
from rsd.certify.usefulness import usefulness_check
from rsd.core.sampling import SamplingParams
from rsd.drafters.base import Drafter
from rsd.drafters.contract import DrafterContractError
from rsd.verify.contract import VerifierContractError


def _guarded(name: str, check: Callable[..., Check], *args) -> Check:
    """Run one check; an error raised by the drafter's code is that check's FAIL, in one line."""
    try:
        return check(*args)
    except DrafterContractError as err:
        return Check(name, False, f"the drafter broke its contract: {err}")
    except VerifierContractError as err:
        return Check(name, False, f"the verifier broke its contract: {err}")
    except Exception as err:  # noqa: BLE001 - user code may raise anything; the certificate must still be printed
        return Check(name, False, raised_text("", err).lstrip())


def certify(name: str, drafter: Drafter, samples: int = 2000, sampling: tuple[SamplingParams, ...] = MC_SAMPLING,
            embedded: bool = False, usefulness: bool = False, table_samples: int = 1000) -> Certificate:
    """Every oracle for one drafter instance; with `usefulness`, also `usefulness_check` (never the verdict)."""
    checks = [_guarded("exact engine", engine_exact_check, drafter)]
    if drafter.uses_draft_model:
        checks.append(_guarded("exact engine, feature head", feature_exact_check, drafter))
    checks += [
              _guarded("exact enumeration", exact_check, drafter),
              _guarded("Monte Carlo tables", table_monte_carlo_check, drafter, table_samples),
              _guarded("draw helpers", draw_helpers_check)]
    checks += [_guarded(f"Monte Carlo T={params.temperature:g}", monte_carlo_check, drafter, params, samples)
               for params in sampling]
    checks.append(_guarded("greedy identity", greedy_check, drafter, embedded))
    rule = drafter.rule if isinstance(drafter.rule, str) else getattr(drafter.rule, "__name__", "custom")
    return Certificate(name, drafter.describe(), rule, checks, str(drafter.verifier),
                       usefulness_check(name, drafter) if usefulness else None)
