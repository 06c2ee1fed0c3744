"""File helpers shared by the sandbox's cached, reproducible builds."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CHUNK = 1 << 20
SOURCE_DATE_EPOCH = 1767225600  # 2026-01-01T00:00:00Z: fixed timestamps make builds reproducible


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` in one rename (nothing is written when it already holds ``data``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
