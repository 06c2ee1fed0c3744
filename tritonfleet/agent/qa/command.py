"""What ``tritonfleet-agent qa run`` and ``qa check`` do (the CLI parses, this runs).

``run``: load every suite (and the built-in self-test with ``--selftest``); wait for each server to be
ready; fetch each suite's model metadata from each server that serves the model (``--server-models``; a
server without it serves every model) and check every case against it; only then
send inference, server by server, suite by suite, case by case, level by level; write the report.
Exit 0: every check passed (or was skipped); 1: a check failed or hit an error (unreachable server,
model not ready, failed request); 2: a bad suite or argument, found before any inference (one line
each on stderr, no report written).

``check``: the same loading and, given servers, the same metadata checks; no inference.
"""

from __future__ import annotations

import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TextIO, overload

from . import report as reports
from .bind import Plan, bind_suite
from .client import ClientError, Conn, Endpoint, ProtocolUnavailable, client_module
from .runner import Level, run_level
from .selftest import write_suites
from .suites import LoadedSuite, SuiteError, load_all, load_suite

EXIT_OK, EXIT_FAILED, EXIT_BAD = 0, 1, 2


@dataclass
class Server:
    """A ``--server NAME=URL[,URL]``: its gRPC and/or HTTP URL."""

    name: str
    urls: dict[str, str]  # grpc|http -> grpc://host:port | http://host:port
    models: frozenset[str] | None = None  # the models it loads; None: every model

    def serves(self, model: str) -> bool:
        return self.models is None or model in self.models

    @overload
    def protocol(self, wanted: None) -> str: ...
    @overload
    def protocol(self, wanted: str | None) -> str | None: ...
    def protocol(self, wanted: str | None) -> str | None:
        """The protocol to use (``wanted`` or, by default, gRPC when the server has it); None: no URL for it."""
        if wanted is not None:
            return wanted if wanted in self.urls else None
        return "grpc" if "grpc" in self.urls else "http"

    def endpoint(self, protocol: str) -> Endpoint:
        return Endpoint.from_url(self.name, self.urls[protocol])


@dataclass
class Options:
    suites: list[str] = field(default_factory=list)
    selftest: bool = False
    servers: list[Server] = field(default_factory=list)
    protocol: str | None = None  # default for cases that do not say
    out: Path | None = None
    stamp: str = ""
    neuron_cores: int | None = None  # None: no limit
    timeout: float = 30.0  # per request
    wait: float = 60.0  # for a server to be ready
    headers: dict[str, str] | None = None


class BadRun(Exception):
    """Exit 2 before any inference: ``lines`` are the one-line errors."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def load(opts: Options, workdir: Path) -> list[LoadedSuite]:
    """Every suite of ``--suites`` and ``--selftest`` (written under ``workdir``); BadRun on any bad one."""
    try:
        suites, errors = load_all(opts.suites) if opts.suites else ([], [])
    except SuiteError as exc:
        raise BadRun([str(exc)]) from None
    if opts.selftest:
        for path in write_suites(workdir / "selftest"):
            try:
                suites.append(load_suite(path, f"selftest/{path.name}"))
            except SuiteError as exc:  # a bug: the built-in suites are fixed
                errors.append(exc)
    if errors:
        raise BadRun([str(e) for e in errors])
    return suites


def _skip_reason(ls: LoadedSuite, opts: Options) -> str | None:
    need = ls.suite.neuron_cores
    if opts.neuron_cores is not None and need is not None and need > opts.neuron_cores:
        return f"needs {need} NeuronCores, the host has {opts.neuron_cores}"
    return None


@dataclass
class Job:
    server: Server
    suite: LoadedSuite
    plans: list[Plan] = field(default_factory=list)
    protocols: list[str] = field(default_factory=list)  # per plan
    skip: str | None = None  # skipped: why
    error: str | None = None  # unreachable server, model not ready


def unserved(suites: list[LoadedSuite], servers: list[Server], host: str) -> list[str]:
    """One line per model of ``suites`` that none of ``servers`` loads (their ``--server-models``)."""
    lines = []
    for model in dict.fromkeys(ls.model for ls in suites):
        if servers and not any(s.serves(model) for s in servers):
            loads = "; ".join(f"{s.name}: {', '.join(sorted(s.models or ())) or 'none'}" for s in servers)
            shown = ", ".join(ls.display for ls in suites if ls.model == model)
            lines.append(f"{shown}: model {model}: no server on {host} loads it ({loads})")
    return lines


def plan(suites: list[LoadedSuite], opts: Options, connect: Callable[[Endpoint], Conn]) -> list[Job]:
    """Check every suite against the metadata of each server that serves its model; BadRun if a suite does
    not fit its model, or if no server serves it."""
    missing = unserved(suites, opts.servers, socket.gethostname())
    if missing:
        raise BadRun(missing)
    jobs: list[Job] = []
    errors: list[str] = []
    for server in opts.servers:
        default = server.protocol(opts.protocol) or server.protocol(None)
        conn = None
        down = None
        try:
            conn = connect(server.endpoint(default))
            conn.wait_ready(opts.wait)
        except ProtocolUnavailable as exc:
            raise BadRun([f"--server {server.name}: {exc}"]) from None
        except ClientError as exc:
            down = str(exc)
        try:
            for ls in suites:
                if not server.serves(ls.model):  # another server's model: not asked here
                    continue
                job = Job(server, ls, skip=_skip_reason(ls, opts))
                jobs.append(job)
                if job.skip or down or conn is None:
                    job.error = None if job.skip else down
                    continue
                try:
                    info = conn.model_info(ls.model, ls.version)
                except ClientError as exc:
                    job.error = str(exc)
                    continue
                try:
                    job.plans = bind_suite(ls, info)
                except SuiteError as exc:
                    errors.append(str(exc))
                    continue
                for p, lc in zip(job.plans, ls.cases):  # noqa: B905 - one plan per case; 3.9
                    proto = server.protocol(p.protocol or opts.protocol)
                    where = f"cases[{lc.index}].protocol" if lc.case.protocol else "protocol"
                    if proto is None:
                        errors.append(str(SuiteError(ls.display, where, f"{p.protocol}, but server {server.name} "
                                                     f"has no {p.protocol} URL (--server {server.name}=...)")))
                    else:
                        try:
                            client_module(proto)
                        except ProtocolUnavailable as exc:
                            errors.append(str(SuiteError(ls.display, where, str(exc))))
                    job.protocols.append(proto or "")
        finally:
            if conn is not None:
                conn.close()
    if errors:
        raise BadRun(list(dict.fromkeys(errors)))
    return jobs


def execute(jobs: list[Job], opts: Options, report: reports.Report, progress: TextIO | None = None) -> None:
    """Run every job's levels into ``report.levels``."""
    for job in jobs:
        ls = job.suite
        if job.skip or job.error:
            for lc in ls.cases:
                for c in list(lc.case.concurrency or ls.suite.concurrency or [1]):
                    lv = Level(ls.display, ls.model, lc.case.name, job.server.name,
                               job.server.protocol(lc.case.protocol or ls.suite.protocol or opts.protocol) or "",
                               c, lc.case.expect)
                    lv.status, lv.outcome = ("skipped", "skipped") if job.skip else ("error", "request-error")
                    lv.message = job.skip or job.error or ""
                    report.levels.append(lv)
            continue
        for p, proto in zip(job.plans, job.protocols):  # noqa: B905 - 3.9
            endpoint = job.server.endpoint(proto)
            for c in p.concurrency:
                lv = run_level(p, job.server.name, proto, c, partial(Conn, endpoint, opts.timeout, opts.headers))
                report.levels.append(lv)
                if progress is not None:
                    progress.write(f"{lv.status:7} {lv.model} {lv.case} concurrency={c} on {lv.server}\n")
                    progress.flush()


def default_stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def run(opts: Options, out: TextIO | None = None, err: TextIO | None = None, prog: str = "tritonfleet-agent",
        progress: bool = False) -> int:
    """The whole ``qa run``; returns the exit code."""
    out, err = out or sys.stdout, err or sys.stderr
    t0 = time.monotonic()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    report = reports.Report(socket.gethostname(), opts.stamp or default_stamp(), started,
                            servers={s.name: ",".join(s.urls.values()) for s in opts.servers})
    with tempfile.TemporaryDirectory(prefix="tritonfleet-qa-") as tmp:
        try:
            jobs = plan(load(opts, Path(tmp)), opts, lambda e: Conn(e, opts.timeout, opts.headers))
        except BadRun as exc:
            for line in exc.lines:
                err.write(f"{prog}: error: {line}\n")
            return EXIT_BAD
        execute(jobs, opts, report, err if progress else None)
    report.seconds = time.monotonic() - t0
    for line in reports.summary_lines(report):
        out.write(line + "\n")
    if opts.out is not None:
        json_path, xml_path = reports.write(report, opts.out)
        out.write(f"report: {json_path} {xml_path}\n")
    return report.exit_code()


def check(opts: Options, out: TextIO | None = None, err: TextIO | None = None, prog: str = "tritonfleet-agent") -> int:
    """``qa check``: suites (and, given servers, their models' metadata) without inference."""
    out, err = out or sys.stdout, err or sys.stderr
    with tempfile.TemporaryDirectory(prefix="tritonfleet-qa-") as tmp:
        try:
            suites = load(opts, Path(tmp))
            jobs = plan(suites, opts, lambda e: Conn(e, opts.timeout, opts.headers)) if opts.servers else []
        except BadRun as exc:
            for line in exc.lines:
                err.write(f"{prog}: error: {line}\n")
            return EXIT_BAD
    problems = [f"{j.suite.display} on {j.server.name}: {j.error}" for j in jobs if j.error]
    for line in problems:
        err.write(f"{prog}: error: {line}\n")
    cases = sum(len(ls.cases) for ls in suites)
    against = f" against {', '.join(s.name for s in opts.servers)}" if opts.servers else ""
    skipped = sorted({j.suite.display for j in jobs if j.skip})
    tail = f" ({len(skipped)} skipped: {next(j.skip for j in jobs if j.skip)})" if skipped else ""
    if problems:
        return EXIT_FAILED
    out.write(f"ok: {len(suites)} suites, {cases} cases{against}{tail}\n")
    return EXIT_OK
