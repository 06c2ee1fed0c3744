"""QA reports as the fleet sees them: one table over the hosts' reports of a run (``deploys/qa.py`` prints
it; ``tritonfleet qa table`` prints it again from ``reports/``).

Rows: host, model, cases, failures, worst error (output[index] abs/rel), p99 latency. A case counts as a
failure unless its status is ``passed`` or ``skipped`` (so ``failed``, ``error`` and any status this table does
not know). A host whose report is missing, unreadable, without cases or with only skipped ones is a row of
its own and counts as failed: a gate that ran nothing has checked nothing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

logger = logging.getLogger(__name__)


class QAFailed(Exception):
    """Some host failed QA (or has no report); the message says which."""


def load_reports(reports_dir: str, stamp: str | None = None,
                 hosts: list[str] | None = None) -> dict[str, dict | None]:
    """``{host: report}`` of the run ``stamp`` (default: each host's newest), None where unreadable; only
    ``hosts`` when given (a run limited to some hosts), each of which must then have one."""
    out: dict[str, dict | None] = {}
    root = Path(reports_dir)
    dirs = [root / h for h in hosts] if hosts is not None else sorted(p for p in root.glob("*") if p.is_dir())
    for host_dir in dirs:
        paths = [host_dir / f"{stamp}.json"] if stamp else sorted(host_dir.glob("*.json"))[-1:]
        if not paths or not paths[0].is_file():
            if stamp:
                out[host_dir.name] = None
            continue
        try:
            out[host_dir.name] = json.loads(paths[0].read_text())
        except (OSError, ValueError) as exc:
            logger.debug("%s: report %s unreadable: %s", host_dir.name, paths[0], exc)
            out[host_dir.name] = None
    return out


def rows(reports: dict[str, dict | None]) -> list[dict]:
    """One row per host and model."""
    out = []
    for host, report in sorted(reports.items()):
        if report is None:
            out.append({"host": host, "model": "-", "cases": 0, "failures": 1, "worst": "no report", "p99_ms": None})
            continue
        cases = report.get("cases") or []
        if all(c.get("status") == "skipped" for c in cases):
            why = (f"all {len(cases)} cases skipped: {cases[0].get('message') or 'no reason given'}"[:120]
                   if cases else "no cases ran")
            out.append({"host": host, "model": "-", "cases": len(cases), "failures": 1, "worst": why,
                        "p99_ms": None})
            continue
        models: dict[str, list[dict]] = {}
        for case in cases:
            models.setdefault(case.get("model", "?"), []).append(case)
        for model, cases in sorted(models.items()):
            bad = [c for c in cases if c.get("status") not in ("passed", "skipped")]
            # the worst error of the cases meant to pass (a negative case's planted error is no finding)
            graded = [c for c in cases if c.get("worst") and (c.get("expected", "pass") == "pass")]
            worst = max((c["worst"] for c in graded), key=lambda w: w.get("abs") or 0, default=None)
            p99 = max((c["p99_ms"] for c in cases if c.get("p99_ms") is not None), default=None)
            text = "-"
            if worst:
                index = ",".join(str(i) for i in worst.get("index") or [])
                text = f"{worst.get('output')}[{index}] abs {_num(worst.get('abs'))} rel {_num(worst.get('rel'))}"
            if bad:
                text = f"{bad[0].get('message', '')[:80]}" if not worst else text
            out.append({"host": host, "model": model, "cases": len(cases), "failures": len(bad), "worst": text,
                        "p99_ms": p99})
    return out


def _num(value) -> str:
    """A number as the table shows it; ``-`` where the report has none (not finite, BYTES outputs)."""
    return "-" if value is None else f"{value:.3g}"


def print_table(table_rows: list[dict], console: Console | None = None) -> None:
    table = Table(title="QA", title_justify="left")
    for col in ("host", "model", "cases", "failures", "worst error", "p99 ms"):
        table.add_column(col, justify="right" if col in ("cases", "failures", "p99 ms") else "left")
    for r in table_rows:
        style = "red" if r["failures"] else None
        table.add_row(r["host"], r["model"], str(r["cases"]), str(r["failures"]), r["worst"],
                      "-" if r["p99_ms"] is None else f"{r['p99_ms']:.1f}", style=style)
    (console or Console()).print(table)


def fleet_table(reports_dir: str, stamp: str | None = None, hosts: list[str] | None = None) -> None:
    """Print the table of a run (of ``hosts``, when given); raise :class:`QAFailed` naming the hosts that
    failed."""
    table_rows = rows(load_reports(reports_dir, stamp, hosts))
    print_table(table_rows)
    failed = sorted({r["host"] for r in table_rows if r["failures"]})
    if not table_rows:
        raise QAFailed(f"no QA reports under {reports_dir}" + (f" for run {stamp}" if stamp else ""))
    if failed:
        raise QAFailed(f"QA failed on {', '.join(failed)} (reports under {reports_dir}/<host>/)")


@click.group()
def qa() -> None:
    """Accuracy QA reports (run QA with `make qa`, i.e. pyinfra INVENTORY deploys/qa.py)."""


@qa.command("table")
@click.option("--reports", "reports_dir", default="reports", show_default=True, help="Reports directory.")
@click.option("--stamp", default=None, help="Run stamp (default: each host's newest report).")
def table_command(reports_dir: str, stamp: str | None) -> None:
    """Table of the hosts' QA reports; exits non-zero when a host failed."""
    try:
        fleet_table(reports_dir, stamp)
    except QAFailed as exc:
        raise click.ClickException(str(exc)) from None
