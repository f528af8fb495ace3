"""What identifies model files without loading them: content hashes (memoised per process) and a model directory's
listing."""

from __future__ import annotations

import hashlib
from pathlib import Path

_HASHED: dict[tuple, str] = {}


def file_sha256(path: Path) -> str:
    """Content hash, memoised per (path, size, mtime) within the process."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _HASHED:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _HASHED[key] = h.hexdigest()
    return _HASHED[key]


def dir_listing(directory: Path) -> dict:
    """Name, size and mtime of every visible file in a model directory, plus the content hash of its JSON files
    (config, safetensors index, tokenizer config: small, and they say what the weights are)."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    return {"files": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files],
            "json_sha256": {p.name: file_sha256(p) for p in files if p.suffix == ".json"}}
