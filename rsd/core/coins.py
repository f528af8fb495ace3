"""Every random choice the engine makes, behind two small interfaces (docs/algorithms.md#oracles).

`Coins` serves verifiers (accept a candidate, draw a residual token); `Draws` serves drafters (one token, i.i.d.
tokens, Gumbel-top-k, a stochastic beam search step). The engine's implementations draw from the prompt's
torch.Generator; `rsd.certify.outcomes` implements the same interfaces by enumerating every outcome with its exact
probability, so the exact oracle runs a drafter's own `build` and a verifier's own `verify`.
"""

from __future__ import annotations

from typing import Protocol

import torch

from rsd.core.gumbel import gumbel_topk, sbs_step
from rsd.core.sampling import multinomial, sample, sample_iid, sample_iid_rows, uniform


class Coins(Protocol):
    """The only source of randomness a verifier may use."""

    def accept(self, prob: float) -> bool:
        """True with probability `prob` (clipped to [0, 1]): never for prob <= 0, always for prob >= 1."""

    def draw(self, probs: torch.Tensor) -> int:
        """One index drawn from `probs` (a normalised vector)."""


def first_outcome(coins: Coins, probs: torch.Tensor, stop_on: bool) -> int:
    """Flip `coins.accept(p)` for p in `probs` in order, stopping at the first outcome equal to `stop_on`: its index,
    or len(probs) if none. Coins with a `first` method (RandomCoins) do it with one host read."""
    batched = getattr(coins, "first", None)
    if batched is not None:
        return batched(probs, stop_on)
    for i, prob in enumerate(probs.tolist()):
        if coins.accept(prob) == stop_on:
            return i
    return len(probs)


class Draws(Protocol):
    """The only source of randomness a drafter may use (what `rsd.certify`'s exact oracle can see)."""

    def one(self, probs: torch.Tensor) -> int:
        """One token from `probs` [V]."""

    def iid(self, probs: torch.Tensor, n: int) -> list[int]:
        """n i.i.d. tokens from `probs` [V]."""

    def without_replacement(self, probs: torch.Tensor, k: int) -> list[list[int]]:
        """Per row of `probs` [n, V], up to k tokens drawn without replacement, in draw order (Gumbel-top-k)."""

    def beam_step(self, phi: torch.Tensor, key: torch.Tensor, logp: torch.Tensor, width: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One stochastic beam search step: (parent beam, token, phi, key) of the kept pairs (gumbel.sbs_step)."""


def iid_rows(draws: Draws, probs: torch.Tensor, counts: list[int]) -> list[list[int]]:
    """`draws.iid(probs[i], counts[i])` for each row i in order; Draws with an `iid_rows` method (RandomDraws) do it
    with one host read."""
    batched = getattr(draws, "iid_rows", None)
    if batched is not None:
        return batched(probs, counts)
    return [draws.iid(p, n) for p, n in zip(probs, counts)]


class RandomCoins:
    """The engine's coins: u ~ U(0, 1] from the prompt's generator, accept iff u <= prob; draws by multinomial.

    `guard` (a device flag and the error to raise when it is False) is read with the next coin's host read, so a
    step's contract check costs no host read of its own; `settle()` reads it if no coin did.
    """

    def __init__(self, gen: torch.Generator, guard: tuple[torch.Tensor, Exception] | None = None) -> None:
        self.gen = gen
        self._guard = guard

    def _read(self, values: torch.Tensor) -> list[float]:
        """values.tolist() (as float64), the pending guard read in the same transfer (raising its error if False)."""
        values = values.to(torch.float64).flatten()
        if self._guard is None:
            return values.tolist()
        flag, error = self._guard
        self._guard = None
        *out, ok = torch.cat([values, flag.to(values.device, torch.float64).reshape(1)]).tolist()
        if not ok:
            raise error
        return out

    def settle(self) -> None:
        """Read a guard that no coin has read yet."""
        if self._guard is not None:
            self._read(torch.zeros(0, dtype=torch.float64))

    def accept(self, prob: float) -> bool:
        return self._read(uniform(self.gen))[0] <= prob

    def draw(self, probs: torch.Tensor) -> int:
        return int(self._read(multinomial(probs, 1, self.gen))[0])

    def first(self, probs: torch.Tensor, stop_on: bool) -> int:
        """`first_outcome` with one host read: all uniforms drawn at once, then the generator rewound to consume only
        those a sequential run would have (on CPU the stream equals sequential `accept` calls, bit for bit)."""
        n = len(probs)
        if n == 0:
            return 0
        state = self.gen.get_state()
        u = uniform(self.gen, n)
        hit = (u <= probs.to(u.device, torch.float64)) == stop_on
        index = int(self._read(torch.where(hit.any(), hit.to(torch.uint8).argmax(), n))[0])
        if index < n - 1:
            self.gen.set_state(state)
            uniform(self.gen, index + 1)
        return index


class RandomDraws:
    """The engine's draws, from the prompt's generator."""

    def __init__(self, gen: torch.Generator) -> None:
        self.gen = gen

    def one(self, probs: torch.Tensor) -> int:
        return sample(probs, self.gen)

    def iid(self, probs: torch.Tensor, n: int) -> list[int]:
        return sample_iid(probs, n, self.gen)

    def iid_rows(self, probs: torch.Tensor, counts: list[int]) -> list[list[int]]:
        return sample_iid_rows(probs, counts, self.gen)

    def without_replacement(self, probs: torch.Tensor, k: int) -> list[list[int]]:
        return gumbel_topk(probs, k, self.gen)

    def beam_step(self, phi: torch.Tensor, key: torch.Tensor, logp: torch.Tensor, width: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return sbs_step(phi, key, logp, width, self.gen)
