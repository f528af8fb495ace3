"""What a check returns and how the certificate prints: one verdict per oracle, the usefulness report, the text."""

from __future__ import annotations

from dataclasses import dataclass, field

from rsd.core.plugin import PluginError
from rsd.errors import one_line


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


def raised_text(who: str, err: BaseException) -> str:
    """'WHO raised KeyError: message (at file:line)' for an error from a plug-in's code; a PluginError (the engine's
    wrapper around a drafter's or verifier's exception) is shown as the exception it wraps, where it was raised."""
    if isinstance(err, PluginError) and err.__cause__ is not None:
        err = err.__cause__
    return f"{who} raised {type(err).__name__}: {one_line(err)}"
