"""The run's report: ``OUT/<stamp>.json`` (schema 1), JUnit ``OUT/<stamp>.xml`` and the summary lines.

JSON: ``{"schema": 1, "host", "stamp", "started", "seconds", "servers": {name: url},
"summary": {"cases", "passed", "failed", "errors", "skipped"}, "cases": [ROW, ...]}``, a ROW per case x
concurrency x server: ``suite, model, case, server, protocol, concurrency, status, expected, outcome,
message, worst ({output, index, abs, rel} or null), requests, mismatched, batch_size, p50_ms, p99_ms,
throughput`` (inferences per second). JUnit: a ``testsuite`` per suite file (named after its model), a
``testcase`` per row, named ``CASE [concurrency=N, server=S]``, with ``failure`` (status failed), ``error``
or ``skipped``; the message names model, output, element, got and expected.
"""

from __future__ import annotations

import json
import os
import tempfile
import xml.etree.ElementTree as ET
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from .runner import Level

SCHEMA = 1


@dataclass
class Report:
    host: str
    stamp: str
    started: str  # ISO 8601, UTC
    seconds: float = 0.0
    servers: dict[str, str] = field(default_factory=dict)
    levels: list[Level] = field(default_factory=list)

    def summary(self) -> dict[str, int]:
        count = {"cases": len(self.levels), "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
        for lv in self.levels:
            count[{"passed": "passed", "failed": "failed", "error": "errors", "skipped": "skipped"}[lv.status]] += 1
        return count

    def exit_code(self) -> int:
        s = self.summary()
        return 1 if s["failed"] or s["errors"] else 0

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "host": self.host, "stamp": self.stamp, "started": self.started,
                "seconds": round(self.seconds, 3), "servers": dict(self.servers), "summary": self.summary(),
                "cases": [_row(lv) for lv in self.levels]}


def _row(lv: Level) -> dict:
    return {"suite": lv.suite, "model": lv.model, "case": lv.case, "server": lv.server, "protocol": lv.protocol,
            "concurrency": lv.concurrency, "status": lv.status, "expected": lv.expected, "outcome": lv.outcome,
            "message": lv.message, "worst": lv.worst.to_json() if lv.worst is not None else None,
            "requests": lv.requests, "mismatched": lv.mismatched, "batch_size": lv.batch, "p50_ms": lv.p50_ms,
            "p99_ms": lv.p99_ms, "throughput": lv.throughput}


def _by_suite(levels: list[Level]) -> OrderedDict[str, list[Level]]:
    groups: OrderedDict[str, list[Level]] = OrderedDict()
    for lv in levels:
        groups.setdefault(lv.suite, []).append(lv)
    return groups


def junit(report: Report) -> ET.Element:
    s = report.summary()
    root = ET.Element("testsuites", name="tritonfleet-qa", tests=str(s["cases"]), failures=str(s["failed"]),
                      errors=str(s["errors"]), skipped=str(s["skipped"]), time=f"{report.seconds:.3f}")
    for suite, levels in _by_suite(report.levels).items():
        counts = Report(report.host, report.stamp, report.started, levels=levels).summary()
        ts = ET.SubElement(root, "testsuite", name=levels[0].model, file=suite, hostname=report.host,
                           timestamp=report.started, tests=str(counts["cases"]), failures=str(counts["failed"]),
                           errors=str(counts["errors"]), skipped=str(counts["skipped"]),
                           time=f"{sum(lv.seconds for lv in levels):.3f}")
        for lv in levels:
            tc = ET.SubElement(ts, "testcase", classname=f"{lv.model}.{lv.case}",
                               name=f"{lv.case} [concurrency={lv.concurrency}, server={lv.server}]",
                               time=f"{lv.seconds:.3f}", file=suite)
            kind = {"failed": "failure", "error": "error", "skipped": "skipped"}.get(lv.status)
            if kind is not None:
                el = ET.SubElement(tc, kind, message=lv.message)
                if kind != "skipped":
                    el.set("type", lv.outcome)
                    el.text = _details(lv)
            out = ET.SubElement(tc, "system-out")
            out.text = (f"expected={lv.expected} outcome={lv.outcome} protocol={lv.protocol} requests={lv.requests} "
                        f"mismatched={lv.mismatched} p50_ms={lv.p50_ms} p99_ms={lv.p99_ms} "
                        f"throughput={lv.throughput}")
    return root


def _details(lv: Level) -> str:
    lines = [lv.message]
    if lv.worst is not None:
        w = lv.worst
        lines.append(f"model={lv.model} output={w.output} element={w.index} got={w.got!r} expected={w.expected!r} "
                     f"abs={w.abs} rel={w.rel}")
    return "\n".join(lines)


def _atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write(report: Report, out: Path) -> tuple[Path, Path]:
    """Write ``out/<stamp>.json`` and ``out/<stamp>.xml`` (each atomically); return both paths."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, xml_path = out / f"{report.stamp}.json", out / f"{report.stamp}.xml"
    _atomic(json_path, (json.dumps(report.to_json(), indent=1, allow_nan=False) + "\n").encode())
    tree = junit(report)
    ET.indent(tree)
    _atomic(xml_path, ET.tostring(tree, encoding="utf-8", xml_declaration=True) + b"\n")
    return json_path, xml_path


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def summary_lines(report: Report) -> list[str]:
    """One line per suite (and server), then one per case that did not pass, then the totals."""
    lines = []
    for suite, levels in _by_suite(report.levels).items():
        servers: OrderedDict[str, list[Level]] = OrderedDict()
        for lv in levels:
            servers.setdefault(lv.server, []).append(lv)
        for server, group in servers.items():
            c = Report(report.host, report.stamp, report.started, levels=group).summary()
            word = "FAIL" if c["failed"] or c["errors"] else ("SKIP" if c["skipped"] == c["cases"] else "PASS")
            ran = [lv for lv in group if lv.status != "skipped" and lv.latencies]
            lat = sorted(x for lv in ran for x in lv.latencies)
            stats = ""
            if lat:
                p50, p99 = lat[len(lat) // 2] * 1000, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
                best = max((lv.throughput or 0.0) for lv in ran)
                stats = (f"; {sum(lv.requests for lv in ran)} requests, p50 {_ms(p50)} ms, p99 {_ms(p99)} ms, "
                         f"up to {best:.0f} infer/s")
            counts = f"{c['passed']}/{c['cases']} passed" + (f", {c['failed']} failed" if c["failed"] else "") \
                + (f", {c['errors']} errors" if c["errors"] else "") + (f", {c['skipped']} skipped" if c["skipped"] else "")
            lines.append(f"{word} {group[0].model} on {server} ({suite}): {counts}{stats}")
            if word == "SKIP":
                lines[-1] += f" ({group[0].message})"
            for lv in group:
                if lv.status in ("failed", "error"):
                    lines.append(f"  {lv.status.upper()} {lv.case} at concurrency {lv.concurrency}: {lv.message}")
    s = report.summary()
    lines.append(f"{s['cases']} checks: {s['passed']} passed, {s['failed']} failed, {s['errors']} errors, "
                 f"{s['skipped']} skipped in {report.seconds:.1f} s")
    return lines
