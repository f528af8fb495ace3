"""The hub and local directories, read without loading: offline mode, reachability, the hub cache, what a local
directory holds, and the one-line error for a model that cannot be loaded."""

from __future__ import annotations

import functools
import json
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from rsd.models.embedded import ModelUnavailableError
from rsd.models.spec import looks_like_local_path


def offline() -> bool:
    """Whether the hub is switched off: HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is 1, true, yes or on, read now from
    the environment (huggingface_hub reads it once at import; `go_offline` sets it for this process too)."""
    return any(os.environ.get(var, "").strip().upper() in ("1", "TRUE", "YES", "ON")
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


@functools.cache
def hub_reachable(timeout: float = 3.0) -> bool:
    """One TCP connect to the hub endpoint (HF_ENDPOINT) with a short timeout; False when offline. Cached."""
    if offline():
        return False
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
    except OSError:
        return False
    return True


def go_offline() -> None:
    """Switch this process (and its children) to the local caches: no request, no retry, no timeout."""
    from huggingface_hub import constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True
    try:
        import datasets

        datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    except ImportError:
        pass


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def cached_file(repo: str, name: str) -> Path | None:
    """The path of `name` in the cached snapshot `main` of a hub repo; None when not cached, or for an id the hub
    client rejects (nothing is downloaded)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo, name)
    except Exception:  # an id the hub client rejects (HFValidationError) is not cached
        return None
    return Path(found) if isinstance(found, str) else None


def hub_revision(repo: str) -> str | None:
    """The commit of the cached snapshot `main` points to, or None if the repo is not in the local hub cache."""
    found = cached_file(repo, "config.json")
    return found.parent.name if found is not None else None


def cached_hub_dir(repo: str, tokenizer_only: bool = False) -> Path | None:
    """The cached snapshot of a hub repo holding config.json and weights (or only a tokenizer), or None."""
    for name in ("tokenizer_config.json", "tokenizer.json", "config.json") if tokenizer_only else ("config.json",):
        found = cached_file(repo, name)
        if found is not None:
            snapshot = found.parent
            return snapshot if tokenizer_only or any((snapshot / f).exists() for f in WEIGHT_FILES) else None
    return None


TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json",
                   "vocab.txt", "config.json")  # any one of them lets AutoTokenizer find its way


def local_model_problem(path: Path, tokenizer_only: bool = False) -> str | None:
    """Why the local `path` cannot hold a transformers model (or only a tokenizer), read without loading; None if it
    can: a directory with a parseable config.json (or a tokenizer file)."""
    if not path.exists():
        return f"local path {path} does not exist"
    if not path.is_dir():
        return f"local path {path} is a file, not a model directory: point it at the directory holding config.json"
    if tokenizer_only:
        if any((path / f).is_file() for f in TOKENIZER_FILES):
            return None
        return f"local directory {path} holds no tokenizer files ({', '.join(TOKENIZER_FILES)})"
    config = path / "config.json"
    if not config.is_file():
        return f"local directory {path} holds no config.json: it is not a transformers model directory"
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:
        return f"{config} cannot be read as JSON ({str(err).splitlines()[0]}): re-download or re-save the model"
    return None


def unavailable(what: str, spec: str, err: Exception) -> ModelUnavailableError:
    """The one-line error for a model or tokenizer that cannot be loaded, saying how to get it.

    A spec that can only be a path (see rsd.models.spec.looks_like_local_path) or that exists on disk is reported as a
    local path, never as a bad hub id; anything else gets the `hf download` command of the installed huggingface_hub.
    """

    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    path = Path(spec).expanduser()
    if path.exists():
        return ModelUnavailableError(f"could not load the {what} from the local directory {spec!r}: {reason}; it "
                                     "must hold a transformers model (config.json and the weights or tokenizer files)")
    if looks_like_local_path(spec):
        return ModelUnavailableError(f"the {what} {spec!r} is a local path that does not exist (relative paths start "
                                     f"in {Path.cwd()}): fix the model_pair's target/draft/tokenizer path")
    if "hf download" in reason:  # ModelSource.status already said where to get it
        return ModelUnavailableError(f"could not load the {what} {spec!r}: {reason} (gated models need `hf auth "
                                     "login` first), or set the model_pair's target/draft to a local directory")
    return ModelUnavailableError(
        f"could not load the {what} {spec!r} ({reason}); "
        + ("HF_HUB_OFFLINE is set and it is not in the local cache; " if offline() else "")
        + f"download it on a machine with internet (`hf download {spec}`; gated models need `hf auth login` first) "
        "or set the model_pair's target/draft to a local directory")
