"""What a decode yields and how it is timed: the Generation and Step result types and the engine's stopwatch."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from rsd.core.tree import DraftTree


@dataclass
class Generation:
    """One prompt's output and the engine's counters."""

    new_token_ids: list[int] = field(default_factory=list)
    target_calls: int = 0
    draft_calls: int = 0
    tokens_verified: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)
    time_draft_s: float = 0.0
    time_target_s: float = 0.0
    wall_s: float = 0.0
    ttft_s: float = 0.0  # prefill + the first step (the first token's arrival)
    first_step_tokens: int = 0  # tokens the first step emitted (decode rate counts the tokens after them)
    expected_emitted: list[float] = field(default_factory=list)  # per step, exact (docs/algorithms.md#expected-yield)
    # per step: alpha* at the root and the verifier's exact root acceptance (docs/algorithms.md#optimum); None when
    # the step drafted no root candidate
    root_optimum: list[float | None] = field(default_factory=list)
    root_acceptance: list[float | None] = field(default_factory=list)

    @property
    def decode_s(self) -> float:
        """Seconds after the first step: the decode phase."""
        return max(0.0, self.wall_s - self.ttft_s)

    @property
    def decode_tokens(self) -> int:
        return len(self.new_token_ids) - self.first_step_tokens

    @property
    def time_other_s(self) -> float:
        return max(0.0, self.wall_s - self.time_draft_s - self.time_target_s)


@dataclass
class Step:
    """One engine step: the drafted tree, the target laws at its nodes, the accepted path and the emitted tokens."""

    tree: DraftTree
    q: torch.Tensor
    path: list[int]
    emitted: list[int]


class Stopwatch:
    """Accumulates time spans into a Generation's counters without synchronising the device.

    On CPU a span is two perf_counter reads. On CUDA a span is a pair of CUDA events whose elapsed time is read in
    `settle`, once per generation: the node rules and forwards never wait for the GPU because of the clock.
    `now()` is the only synchronising read; the engine calls it at step boundaries only.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def start(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, start, out: Generation, counter: str) -> None:
        """Add the span since `start` to out.<counter> (deferred to `settle` on CUDA)."""
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._pending.append((counter, start, end))
        else:
            setattr(out, counter, getattr(out, counter) + time.perf_counter() - start)

    def settle(self, out: Generation) -> None:
        """Resolve the CUDA spans recorded so far into `out` (call after a synchronising `now()`)."""
        for counter, start, end in self._pending:
            setattr(out, counter, getattr(out, counter) + start.elapsed_time(end) / 1e3)
        self._pending.clear()
