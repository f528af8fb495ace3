"""A feature head as a model source: the files of another source, read as an EAGLE-style head
(rsd.models.feature_head)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsd.harness.schema import ModelPairConfig
from rsd.models.feature_head.config import FeatureHeadConfig, fit_problem, is_feature_head
from rsd.models.feature_head.weights import head_lm, head_num_params
from rsd.models.source_contract import ModelSource


@dataclass(frozen=True)
class FeatureHeadSource(ModelSource):
    """An EAGLE-style feature head (rsd.models.feature_head) in the files of `location`: it drafts in the target's
    vocabulary from the target's hidden states, so it has no tokenizer, context or transformers config of its own."""

    location: ModelSource

    own_vocabulary = False

    def status(self, tokenizer_only: bool = False) -> tuple[bool, str]:
        ok, where = self.location.status(tokenizer_only)
        path = self.location.files()
        if ok or path is None or not is_feature_head(path):
            return ok, where
        return True, f"feature head in {path}"

    def fingerprint(self) -> dict:
        return self.location.fingerprint()

    def files(self) -> Path | None:
        return self.location.files()

    def config(self) -> Any:
        return None

    def num_params(self) -> int | None:
        """The head's own parameters (its embedding and LM head are the target's), from feature_head.json alone."""
        return None if self.missing() else head_num_params(FeatureHeadConfig.read(self.head_dir()))

    def head_dir(self) -> Path:
        """The directory holding feature_head.json and the weights (a shipped head's is checked to exist)."""
        return Path(self.location.path())

    def missing(self) -> bool:
        """Whether its directory holds no feature head."""
        return not is_feature_head(self.head_dir())

    def fit_problem(self, target: ModelSource) -> str | None:
        """Why the head cannot draft for `target`, read from the two configs (None too when the target's is unknown)."""
        config = target.config()
        return None if config is None else fit_problem(FeatureHeadConfig.read(self.head_dir()), config)

    def load(self, cfg: ModelPairConfig, target: Any = None) -> Any:
        return head_lm(self.head_dir(), target)

    def context_length(self) -> int | None:
        return None
