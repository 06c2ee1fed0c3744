"""`make lint` stays clean: ruff over the tree and mypy over tritonfleet/ and roles/ (pyproject's [tool.mypy]),
so a type error or a lint finding fails `make test` too, not only a `make lint` nobody ran."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_mypy_is_clean(tmp_path):
    # the cache outside the checkout: tests do not write into the repository
    done = _run([str(BIN / "mypy"), "--cache-dir", str(tmp_path / "mypy-cache")])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_is_clean():
    done = _run([str(BIN / "ruff"), "check", "--no-cache", "."])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
