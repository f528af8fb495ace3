"""The losslessness certificate of a drafter (`python -m rsd.certify drafter=NAME`; the command is rsd.certify.cli).

One module per check: `exact` (the whole engine, enumerated), `enumeration` (the node rule and tiny trees under the
drafter's candidate scheme), `draws` (the production draw helpers), `monte_carlo`, `greedy` (identity with AR) and
`usefulness` (reported, never the verdict); `suite` runs them all into a `report.Certificate`.
"""

from rsd.certify.cli import compose_drafters, main
from rsd.certify.draws import draw_helpers_check
from rsd.certify.enumeration import exact_check, random_laws
from rsd.certify.exact import EXACT_BOUND, T1, engine_exact_check, feature_exact_check
from rsd.certify.greedy import greedy_check
from rsd.certify.monte_carlo import MC_SAMPLING, RootLawSD, monte_carlo_check, table_monte_carlo_check
from rsd.certify.report import Certificate, Check, Usefulness
from rsd.certify.suite import certify
from rsd.certify.usefulness import usefulness_check

__all__ = ["EXACT_BOUND", "MC_SAMPLING", "T1", "Certificate", "Check", "RootLawSD", "Usefulness", "certify",
           "compose_drafters", "draw_helpers_check", "engine_exact_check", "exact_check", "feature_exact_check",
           "greedy_check", "main", "monte_carlo_check", "random_laws", "table_monte_carlo_check", "usefulness_check"]
