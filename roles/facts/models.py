"""The host agent and the S3 model repository: what is installed, and what a sync would do."""

from __future__ import annotations

import json
from shlex import quote

from pyinfra.api import FactBase


class AgentState(FactBase[dict]):
    """``{"python": "3.11" | None, "machine": "x86_64", "installed": <wheelhouse digest> | None}``: the host
    Python the agent runs on, the machine (``uname -m``) and the wheelhouse its venv was installed from."""

    @staticmethod
    def default() -> dict:
        return {"python": None, "machine": None, "installed": None}

    def command(self, python: str, venv: str) -> str:
        py = quote(python)
        return (f"command -v {py} >/dev/null && {py} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' "
                f"2>/dev/null || echo none; uname -m; cat {quote(venv)}/.wheelhouse 2>/dev/null || echo none")

    def process(self, output: list[str]) -> dict:
        lines = [line.strip() for line in output] + ["none"] * 3
        return {"python": None if lines[0] == "none" else lines[0],
                "machine": None if lines[1] in ("", "none") else lines[1],  # output cut short: not known
                "installed": None if lines[2] == "none" else lines[2]}


class ModelSyncPlan(FactBase[dict]):
    """What ``tritonfleet-agent sync --dry-run --json`` says (``{}`` when the agent cannot say: not
    installed yet, S3 unreachable; the sync itself then reports why)."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self, command: str) -> str:
        # no wait for another sync's lock here: the sync itself waits (and names or ends its holder)
        return f"{command} --dry-run --json --lock-wait 0 2>/dev/null || true"

    def process(self, output: list[str]) -> dict:
        for line in reversed(output):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    return {}
        return {}
