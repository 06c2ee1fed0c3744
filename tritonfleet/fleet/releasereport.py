"""The report of a release rollout (:mod:`tritonfleet.fleet.releaseroll`): a host's row in it
(:class:`HostResult`, its final status one of :data:`STATUSES`), the JSON file the rollout writes
(:func:`write_report`) and the summary it prints (:func:`print_summary`: a table per host, the gates, the seconds
per phase, why it stopped). Both functions read the report's dict only.

:mod:`tritonfleet.fleet.releaseroll` re-exports these names.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A host's final statuses; only ``updated`` is a success.
STATUSES = ("updated", "not serving", "rolled back", "rollback failed", "not started")


@dataclass
class HostResult:
    host: str
    role: str  # "canary" or "rest"
    status: str = "pending"  # one of STATUSES at the end
    before: str | None = None  # the release it served before the rollout (its pull state)
    serving: str | None = None  # the release it served when last seen
    seconds: float | None = None  # from its pointer's write to the first look that saw it serve
    message: str = ""


def write_report(report: dict[str, Any], reports_dir: str) -> Path:
    """``<reports_dir>/release-rollout-<UTC stamp>.json``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = Path(reports_dir) / f"release-rollout-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def _gate_words(gate: dict[str, Any] | None) -> tuple[str, bool]:
    if gate is None:
        return "not run", True
    if gate.get("skipped"):
        return f"skipped ({gate['skipped']})", True
    return str(gate.get("line") or ("passed" if gate.get("ok") else "failed")), bool(gate.get("ok"))


def print_summary(report: dict[str, Any]) -> None:
    """A table per host (role, status, release before and now, seconds to serve, why), then the gates, the
    seconds per phase and why the rollout stopped."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"release rollout: {report['release']} (canary: {report['pointer']})", title_justify="left")
    for col in ("host", "role", "status", "before", "serves", "seconds", "why"):
        table.add_column(col)
    for h in report["hosts"]:
        style = {"updated": None, "not started": "dim"}.get(h["status"], "red")
        seconds = "-" if h["seconds"] is None else f"{h['seconds']:.0f}"
        table.add_row(*(escape(str(x)) for x in (h["host"], h["role"], h["status"], h["before"] or "-",
                                                  h["serving"] or "-", seconds, (h["message"] or "")[:160])),
                      style=style)
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    for name, title in (("serve", "canary gate"), ("qa", "QA gate"), ("metrics", "metric gate")):
        words, ok = _gate_words(report["gates"].get(name))
        style = "green" if ok else "red"
        console.print(f"[{style}]{title}: {escape(words)}[/{style}]", highlight=False)
    rb = report.get("rollback")
    if rb:
        what = rb["error"] or ", ".join(f"{n} {how}" for n, how in rb["pointers"].items()) or "nothing to restore"
        console.print(f"[red]rollback to {escape(str(rb['release']))}: {escape(what)}[/red]", highlight=False)
    if report["phases"]:
        console.print("seconds: " + ", ".join(f"{k} {v:g}" for k, v in report["phases"].items()), highlight=False)
    if report["stopped"]:
        console.print(f"[red]stopped: {escape(report['stopped'])}[/red]", highlight=False)
