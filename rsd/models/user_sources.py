"""The sources of models the user points at: a local directory or a hub id, checked before loading."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rsd.errors import ConfigError
from rsd.models import hub
from rsd.models.fingerprints import dir_listing
from rsd.models.source_contract import ModelSource


@dataclass(frozen=True)
class UserFiles(ModelSource):
    """A model the user points at (a local directory or a hub id): checked before loading, so that a missing one
    fails at once instead of after minutes of hub retries."""

    def require(self, what: str) -> None:
        """Also: when the hub does not answer but the model is cached, switch to offline mode so transformers reads
        the cache without retrying."""
        ok, where = self.status(tokenizer_only=what == "tokenizer")
        if not ok:
            raise hub.unavailable(what, self.spec, FileNotFoundError(where))
        if where.startswith("hub cache") and not hub.hub_reachable():
            hub.go_offline()


@dataclass(frozen=True)
class LocalSource(UserFiles):
    """A local path: a spec that exists on disk or can only be a path (rsd.models.spec.looks_like_local_path)."""

    @property
    def local(self) -> Path:
        return Path(self.spec).expanduser()

    def status(self, tokenizer_only: bool = False) -> tuple[bool, str]:
        problem = hub.local_model_problem(self.local, tokenizer_only)
        return problem is None, f"local directory {self.local}" if problem is None else problem

    def fingerprint(self) -> dict:
        """Names, sizes and mtimes of its files plus the content hash of its JSON files; a missing path says so."""
        if self.local.is_dir():
            return {"spec": self.spec, **dir_listing(self.local)}
        return {"spec": self.spec, "missing": not self.local.exists()}

    def files(self) -> Path | None:
        return self.local

    def check(self, key: str) -> None:
        if not self.local.exists():
            raise ConfigError(f"model_pair.{key}={self.spec!r} is a local path that does not exist (relative paths "
                              f"start in {Path.cwd()}): fix the path, or give a hub id such as facebook/opt-125m")


@dataclass(frozen=True)
class HubSource(UserFiles):
    """A hub id: read from the hub cache, or downloaded on first use when the hub answers."""

    def status(self, tokenizer_only: bool = False) -> tuple[bool, str]:
        snapshot = hub.cached_hub_dir(self.spec, tokenizer_only)
        if snapshot is not None:
            return True, f"hub cache {snapshot}"
        if hub.hub_reachable():
            return True, "hub (reachable; downloaded on first use)"
        return False, ("not in the hub cache and " + ("HF_HUB_OFFLINE is set" if hub.offline() else
                                                       "the hub is unreachable")
                       + f"; get it with `hf download {self.spec}` on a machine with internet")

    def fingerprint(self) -> dict:
        """The cached snapshot's commit, else None (the id alone)."""
        return {"spec": self.spec, "hub_revision": hub.hub_revision(self.spec)}

    def files(self) -> Path | None:
        found = hub.cached_file(self.spec, "config.json")
        return found.parent if found is not None else None
