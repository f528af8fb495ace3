"""Every random choice the engine makes, behind two small interfaces (docs/algorithms.md#oracles).

`Coins` serves verifiers (accept a candidate, draw a residual token); `Draws` serves drafters (one token, i.i.d.
tokens, Gumbel-top-k, a stochastic beam search step). The engine's implementations draw from the prompt's
torch.Generator; `rsd.oracles` implements the same interfaces by enumerating every outcome with its exact
probability, so the exact oracle runs a drafter's own `build` and a verifier's own `verify`.
"""

from __future__ import annotations

from typing import Protocol

import torch

from rsd.gumbel import gumbel_topk, sbs_step
from rsd.sampling import sample, sample_iid, uniform


class Coins(Protocol):
    """The only source of randomness a verifier may use."""

    def accept(self, prob: float) -> bool:
        """True with probability `prob` (clipped to [0, 1]): never for prob <= 0, always for prob >= 1."""

    def draw(self, probs: torch.Tensor) -> int:
        """One index drawn from `probs` (a normalised vector)."""


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
        """One stochastic beam search step: (parent beam, token, phi, key) of the kept pairs (rsd.gumbel.sbs_step)."""


class RandomCoins:
    """The engine's coins: u ~ U(0, 1] from the prompt's generator, accept iff u <= prob; draws by multinomial."""

    def __init__(self, gen: torch.Generator) -> None:
        self.gen = gen

    def accept(self, prob: float) -> bool:
        return float(uniform(self.gen)) <= prob

    def draw(self, probs: torch.Tensor) -> int:
        return sample(probs, self.gen)


class RandomDraws:
    """The engine's draws, from the prompt's generator."""

    def __init__(self, gen: torch.Generator) -> None:
        self.gen = gen

    def one(self, probs: torch.Tensor) -> int:
        return sample(probs, self.gen)

    def iid(self, probs: torch.Tensor, n: int) -> list[int]:
        return sample_iid(probs, n, self.gen)

    def without_replacement(self, probs: torch.Tensor, k: int) -> list[list[int]]:
        return gumbel_topk(probs, k, self.gen)

    def beam_step(self, phi: torch.Tensor, key: torch.Tensor, logp: torch.Tensor, width: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return sbs_step(phi, key, logp, width, self.gen)
