"""``tritonfleet-agent``: the host-side agent's command line (what ``sync`` does: ``sync.py``'s docstring;
``qa``: ``qa/command.py``'s; ``watchdog``, the ``tritonfleet-watchdog`` service: ``watchrun.py``'s; ``pull``:
``pull.py``'s). The ``watchdog`` and ``pull`` sub-commands' arguments and commands are in ``watchcli.py`` and
``pullcli.py``.

Exit codes: 0 done, 1 the sync failed (qa: a check failed), 2 bad arguments (qa: or a bad suite); every
error is one line on stderr. ``qa`` imports its dependencies (numpy, tritonclient, PyYAML, pydantic) only
when it runs: ``sync`` never loads them.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn

from . import memory, modelcheck
from .args import (
    _endpoint,
    _host_name,
    _percent,
    _qa_server,
    _region,
    _seconds,
    _seconds_in,
    _server,
    _server_capacity,
    _server_models,
    _source,
    _stamp,
    _whole,
)
from .layout import LOCK_WAIT
from .remote import CONNECT_TIMEOUT, DEADLINE, READ_TIMEOUT
from .sync import Options, Progress, Result, run
from .watchcli import _add_watchdog

PROG = "tritonfleet-agent"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line (argparse's own also prints the usage)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_memory(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server-capacity", action="append", default=[], type=_server_capacity,
                   metavar="NAME=DEVICESxMIB",
                   help="server NAME's devices (GPUs with --accelerator gpu) and the MiB each holds: before current "
                        "is switched to a new version, the models the server loads from it must fit in that less "
                        "--memory-headroom, else the sync fails and current keeps serving; repeatable")
    p.add_argument("--memory-headroom", type=_percent, default=memory.DEFAULT_HEADROOM_PCT, metavar="PCT",
                   help=f"percent of each server's device memory kept free (default {memory.DEFAULT_HEADROOM_PCT:g})")
    p.add_argument("--accelerator", choices=("neuron", "gpu"), default="neuron",
                   help="the servers' devices: Neuron devices or GPUs (default neuron)")
    p.add_argument("--host-name", type=_host_name, metavar="NAME",
                   help="the host's name in the memory check's error (default: this machine's host name)")


def memory_plan(args: argparse.Namespace, parser: argparse.ArgumentParser,
                models: dict[str, frozenset[str]]) -> memory.MemoryPlan | None:
    """The servers' ``--server-capacity`` (each once), each with its ``--server-models``; None without any."""
    servers: dict[str, memory.ServerMemory] = {}
    for name, devices, mib in args.server_capacity:
        if name in servers:
            parser.error(f"--server-capacity {name} given twice")
        servers[name] = memory.ServerMemory(name, devices, mib, models.get(name))
    if not servers:
        return None
    return memory.MemoryPlan(args.host_name or socket.gethostname(), tuple(servers.values()), args.accelerator,
                             args.memory_headroom)


def loaded_models(args: argparse.Namespace, models: dict[str, frozenset[str]]) -> frozenset[str] | None:
    """The models this host's servers load: those of their ``--server-models`` when each ``--server`` has one;
    None (every model) otherwise, or without servers (poll mode loads every model)."""
    names = [name for name, _ in args.server]
    if not names or any(name not in models for name in names):
        return None
    return frozenset().union(*(models[name] for name in names))


def _add_server_models(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server-models", action="append", default=[], type=_server_models,
                   metavar="NAME=MODEL[,MODEL...]",
                   help="the models server NAME loads (only those are loaded, unloaded and checked on it); "
                        "default: every model of the repository; repeatable")


def server_models(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, frozenset[str]]:
    """``--server-models`` by server name; each names a ``--server``, once."""
    servers = [s[0] for s in args.server]
    out: dict[str, frozenset[str]] = {}
    for name, models in args.server_models:
        if name not in servers:
            parser.error(f"--server-models {name}: no --server {name}")
        if name in out:
            parser.error(f"--server-models {name} given twice")
        out[name] = models
    return out


def _qa_arguments(p: argparse.ArgumentParser, run: bool) -> None:
    p.add_argument("--suites", action="append", default=[], metavar="DIR",
                   help="a directory of suite files (*.yaml, *.yml, *.json) or one suite file; repeatable")
    p.add_argument("--selftest", action="store_true", help="also the built-in Neuron self-test (add_sub, 8 configs)")
    p.add_argument("--server", action="append", default=[], type=_qa_server, metavar="NAME=URL[,URL]",
                   required=run, help="a Triton server: grpc://HOST:PORT and/or http://HOST:PORT; repeatable")
    _add_server_models(p)
    p.add_argument("--protocol", choices=("grpc", "http"),
                   help="for cases that do not choose one (default: grpc when the server has a gRPC URL)")
    p.add_argument("--neuron-cores", type=_whole(0, 1024), metavar="N",
                   help="NeuronCores of this host: suites that need more are skipped (default: no limit)")
    p.add_argument("--timeout", type=_seconds, default=30.0, metavar="S",
                   help="seconds per request and metadata call (default 30)")
    p.add_argument("--wait", type=_seconds, default=60.0, metavar="S",
                   help="seconds to wait for each server to be ready (default 60)")
    p.add_argument("--header-file", metavar="FILE",
                   help="a header for every request, one line 'name: value' (mode 0600)")


def _add_qa(commands) -> None:
    qa = commands.add_parser("qa", help="accuracy QA: run suites of known inputs/outputs against local servers",
                             description="Accuracy QA against the Triton servers of this host.")
    sub = qa.add_subparsers(dest="qa_command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    run = sub.add_parser("run", help="check suites, send them, write OUT/<stamp>.json and .xml",
                         description="Run QA suites. Exit 0 all passed, 1 a check failed, 2 bad suites/arguments.")
    _qa_arguments(run, run=True)
    run.add_argument("--out", required=True, metavar="DIR", help="writes DIR/<stamp>.json and DIR/<stamp>.xml")
    run.add_argument("--stamp", type=_stamp, metavar="STAMP", help="report file name (default: UTC time)")
    run.add_argument("--progress", action="store_true", help="one line per check on stderr as it finishes")
    run.set_defaults(run=_qa, parser=run)
    check = sub.add_parser("check", help="validate suites (against the servers' model metadata if given); "
                                         "no inference", description="Validate QA suites without inference.")
    _qa_arguments(check, run=False)
    check.set_defaults(run=_qa, parser=check)
    publish = sub.add_parser("publish", help="upload a report to S3 and/or write the Prometheus textfile",
                             description="Publish a QA report (publish.py). Exit 0 published, 1 failed.")
    publish.add_argument("--report", required=True, metavar="FILE", help="OUT/<stamp>.json (its .xml goes too)")
    publish.add_argument("--s3", metavar="s3://BUCKET/PREFIX", type=_source, help="where to upload the reports")
    publish.add_argument("--endpoint-url", type=_endpoint, metavar="URL", help="another S3 endpoint")
    publish.add_argument("--region", type=_region, help="the bucket's region")
    publish.add_argument("--textfile", metavar="FILE", help="node_exporter textfile to write (atomically)")
    publish.set_defaults(run=_qa_publish, parser=publish)


def _sync_arguments(sync: argparse.ArgumentParser) -> None:
    sync.add_argument("--source", required=True, type=_source, metavar="s3://BUCKET[/PREFIX]",
                      help="the model repository in S3")
    sync.add_argument("--dest", required=True, metavar="DIR", help="the repository root on the host")
    sync.add_argument("--endpoint-url", type=_endpoint, metavar="URL", help="another S3 endpoint")
    sync.add_argument("--region", type=_region, help="the bucket's region (default: boto3's configuration)")
    sync.add_argument("--path-style", action="store_true", help="path-style addressing")
    sync.add_argument("--concurrency", type=_whole(1, 256), default=16, metavar="N",
                      help="parallel GET requests (default 16)")
    sync.add_argument("--keep", type=_whole(1, 1000), default=3, metavar="N",
                      help="versions kept, the current one included (default 3)")
    sync.add_argument("--retries", type=_whole(1, 10), default=3, metavar="N",
                      help="download attempts per object when its check fails (default 3)")
    sync.add_argument("--allow-empty", action="store_true", help="accept an empty prefix")
    sync.add_argument("--dry-run", action="store_true", help="report what would change, download nothing")
    sync.add_argument("--no-fsync", action="store_true", help="skip the fsyncs")
    sync.add_argument("--json", action="store_true", help="one JSON object on stdout")
    sync.add_argument("--server", action="append", default=[], type=_server, metavar="NAME=URL",
                      help="a Triton server (explicit model control) to reload after the switch: grpc://HOST:PORT "
                      "(over HTTP a load holds up the server's other HTTP clients); repeatable")
    _add_server_models(sync)
    sync.add_argument("--header-file", metavar="FILE",
                      help="the restricted-API header for the servers, one line 'name: value' (mode 0600)")
    _add_memory(sync)
    sync.add_argument("--compat", metavar="FILE",
                      help="the image's model limits (JSON, written by the models role from tritonfleet/compat.py): "
                           "before current is switched to a new version, the compiler and NEFF versions of each "
                           "Neuron model are checked against them; a model the image cannot load fails the sync "
                           "(current keeps serving), an unknown version is a warning")
    sync.add_argument("--timeout", type=_whole(1, 3600), default=180, metavar="S",
                      help="seconds to wait for a server to be ready, and for each model load (default 180)")
    sync.add_argument("--connect-timeout", type=_seconds_in(0.1, 300), default=CONNECT_TIMEOUT, metavar="S",
                      help=f"seconds for S3 to accept a connection, per attempt (default {CONNECT_TIMEOUT:g})")
    sync.add_argument("--read-timeout", type=_seconds_in(0.1, 3600), default=READ_TIMEOUT, metavar="S",
                      help=f"seconds for S3 to answer, per attempt (default {READ_TIMEOUT:g})")
    sync.add_argument("--deadline", type=_seconds_in(1, 7 * 86400), default=DEADLINE, metavar="S",
                      help=f"seconds for the S3 part of the sync as a whole (default {DEADLINE:g})")
    sync.add_argument("--lock-wait", type=_seconds_in(0, 3600), default=LOCK_WAIT, metavar="S",
                      help=f"seconds to wait for another sync's lock (default {LOCK_WAIT:g}); then a stuck "
                           "agent holding it is ended, a live one named")


def build_parser() -> argparse.ArgumentParser:
    from .pullcli import _add_pull  # pullcli.py imports this module: here, not at the top

    parser = _Parser(prog=PROG, description="Host-side agent of tritonfleet.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    sync = commands.add_parser("sync", help="sync the model repository from S3 into a directory",
                               description="Sync a Triton model repository from S3 into DIR/versions/<id>, "
                                           "then switch DIR/current to it.")
    _sync_arguments(sync)
    sync.set_defaults(run=_sync, parser=sync, verify=False)
    verify = commands.add_parser("verify", help="hash every file of DIR/current against its manifest and repair "
                                                 "what differs from S3 (a sync that trusts nothing on disk)",
                                 description="Check every file of the current version against its manifest "
                                             "(md5), then sync: damaged files are downloaded again into a new "
                                             "version, which current is switched to. Same options as sync.")
    _sync_arguments(verify)
    verify.set_defaults(run=_sync, parser=verify, verify=True)
    _add_qa(commands)
    switch = commands.add_parser("switch", help="point DIR/current back at a kept version, reloading the servers",
                                 description="Switch the model repository to a version kept on disk (a rollback) "
                                             "and reload what differs on the running servers.")
    switch.add_argument("--dest", required=True, metavar="DIR", help="the repository root on the host")
    switch.add_argument("--to", required=True, metavar="VERSION", help="a version id under DIR/versions")
    switch.add_argument("--server", action="append", default=[], type=_server, metavar="NAME=URL",
                        help="a Triton server (explicit model control) to reload: grpc://HOST:PORT (or http://); "
                        "repeatable")
    _add_server_models(switch)
    switch.add_argument("--header-file", metavar="FILE", help="the restricted-API header, 'name: value' (0600)")
    switch.add_argument("--timeout", type=_whole(1, 3600), default=180, metavar="S",
                        help="seconds to wait for a server to be ready, and for each model load (default 180)")
    switch.set_defaults(run=_switch, parser=switch)
    _add_watchdog(commands)
    _add_pull(commands)
    return parser


class _Line(Progress):
    """One progress line on a terminal (stderr), at most ten updates a second."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.files = self.nbytes = self.done = self.got = 0
        self.width = 0
        self.shown = 0.0
        self._lock = threading.Lock()

    def begin(self, files: int, nbytes: int) -> None:
        self.files, self.nbytes = files, nbytes
        if files:
            self._show(force=True)

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.got += nbytes
        self._show()

    def file_done(self) -> None:
        with self._lock:
            self.done += 1
        self._show(force=self.done == self.files)

    def _show(self, force: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if not force and now - self.shown < 0.1:
                return
            self.shown = now
            text = f"downloading {self.done}/{self.files} files, {_size(self.got)} of {_size(self.nbytes)}"
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
            self.stream.flush()

    def clear(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""  # not reached


def summary(r: Result) -> str:
    """The one line a sync prints without --json."""
    counts = (f"{len(r.files['added'])} added, {len(r.files['changed'])} changed, "
              f"{len(r.files['removed'])} removed, {r.unchanged} unchanged")
    models = " ".join([f"+{m}" for m in r.models["added"]] + [f"~{m}" for m in r.models["changed"]]
                      + [f"-{m}" for m in r.models["removed"]])
    tail = f"; models: {models}" if models else ""
    if r.pruned:
        tail += f"; pruned {len(r.pruned)} old version{'s' if len(r.pruned) > 1 else ''}"
    if r.unverified:
        tail += f"; {len(r.unverified)} checked by size only (no md5 ETag or checksum)"
    reload = r.reload or {}
    if reload.get("loaded") or reload.get("unloaded"):
        tail += (f"; reloaded on {', '.join(reload['servers'])}: {len(reload['loaded'])} loaded, "
                 f"{len(reload['unloaded'])} unloaded")
    if reload.get("skipped"):
        tail += f"; not running (they load it when they start): {', '.join(reload['skipped'])}"
    if r.repaired:
        tail += f"; repaired {len(r.repaired)} damaged file{'s' if len(r.repaired) > 1 else ''}: " + ", ".join(
            f"{p} ({why})" for p, why in sorted(r.repaired.items())[:5]) + (", ..." if len(r.repaired) > 5 else "")
    elif r.damaged and r.status == "dry-run":
        tail += f"; {len(r.damaged)} damaged file{'s' if len(r.damaged) > 1 else ''} to repair: " + ", ".join(
            f"{p} ({why})" for p, why in sorted(r.damaged.items())[:5]) + (", ..." if len(r.damaged) > 5 else "")
    if r.status == "dry-run" and reload.get("pending"):
        tail += "; a reload of the servers is pending"
    if r.status == "unchanged":
        return f"no changes: {r.version} ({r.unchanged} files) in {r.seconds:.1f} s{tail}"
    if r.status == "dry-run":
        return f"dry run: {counts}; would download up to {_size(r.bytes)}{tail}"
    if r.status == "switched":
        return f"switched to {r.version} (already on disk): {counts} in {r.seconds:.1f} s{tail}"
    return (f"synced {r.version}: {counts}; {r.downloaded} downloaded ({_size(r.bytes)}), {r.linked} linked "
            f"in {r.seconds:.1f} s{tail}")


def sync_setup(args: argparse.Namespace, parser: argparse.ArgumentParser):
    """The sync's options and the servers to reload (``sync``, ``verify`` and ``pull``); an int is the exit code
    of a setup that failed (its error printed)."""
    if os.path.exists(args.dest) and not os.path.isdir(args.dest):
        parser.error(f"--dest {args.dest}: not a directory")
    bucket, prefix = args.source
    opts = Options(bucket=bucket, prefix=prefix, dest=args.dest, endpoint_url=args.endpoint_url,
                   region=args.region, path_style=args.path_style, concurrency=args.concurrency, keep=args.keep,
                   retries=args.retries, allow_empty=args.allow_empty, dry_run=args.dry_run,
                   durable=not args.no_fsync, connect_timeout=args.connect_timeout,
                   read_timeout=args.read_timeout, deadline=args.deadline, lock_wait=args.lock_wait,
                   hard_stop=True, verify=args.verify)
    live = None
    models = server_models(args, parser)
    opts.memory = memory_plan(args, parser, models)
    if args.compat:
        try:
            opts.compat = modelcheck.load_limits(args.compat)
        except modelcheck.LimitsError as exc:
            parser.error(f"--compat {args.compat}: {exc}")
        opts.compat_models = loaded_models(args, models)
    if args.server:
        from .live import Live, Server, read_header
        from .manifest import SyncError

        try:
            header = read_header(args.header_file) if args.header_file else None
            live = Live([Server(n, u, models.get(n)) for n, u in args.server], header, args.timeout)
        except SyncError as exc:  # the header file, or no gRPC client for a grpc:// server
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 1
    return opts, live


def _sync(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    setup = sync_setup(args, parser)
    if isinstance(setup, int):
        return setup
    opts, live = setup
    line = _Line(sys.stderr) if not args.json and sys.stderr.isatty() else None
    try:
        result = run(opts, line, live)
    except KeyboardInterrupt:
        result = Result(error="interrupted")
    if line:
        line.clear()
    for warning in result.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(asdict(result), sort_keys=True))
    elif result.status != "failed":
        print(summary(result))
    if result.status == "failed":
        for line in (result.compat or {}).get("refused") or [result.error]:  # a refusal: one line per model
            print(f"{PROG}: error: {line}", file=sys.stderr)
        return 1
    return 0


def _qa(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not args.suites and not args.selftest:
        parser.error("give --suites DIR and/or --selftest")
    names = [name for name, _ in args.server]
    if len(set(names)) != len(names):
        parser.error(f"--server {next(n for n in names if names.count(n) > 1)} given twice")
    models = server_models(args, parser)
    for name, urls in args.server:
        if args.protocol and args.protocol not in urls:
            parser.error(f"--protocol {args.protocol}: server {name} has no {args.protocol} URL")
    out = getattr(args, "out", None)
    if out is not None and os.path.exists(out) and not os.path.isdir(out):
        parser.error(f"--out {out}: not a directory")
    headers = None
    if args.header_file:
        from .live import read_header
        from .manifest import SyncError

        try:
            name, value = read_header(args.header_file)
        except SyncError as exc:
            parser.error(str(exc))
        headers = {name: value}
    try:
        from .qa import command
    except ImportError as exc:
        print(f"{PROG}: error: qa needs numpy, tritonclient, PyYAML and pydantic 2 on this host: {exc}",
              file=sys.stderr)
        return 1
    opts = command.Options(suites=args.suites, selftest=args.selftest,
                           servers=[command.Server(n, u, models.get(n)) for n, u in args.server],
                           protocol=args.protocol,
                           out=Path(out) if out is not None else None, stamp=getattr(args, "stamp", None) or "",
                           neuron_cores=args.neuron_cores, timeout=args.timeout, wait=args.wait, headers=headers)
    try:
        if args.qa_command == "check":
            return command.check(opts, prog=PROG)
        return command.run(opts, prog=PROG, progress=args.progress)
    except KeyboardInterrupt:
        print(f"{PROG}: error: interrupted", file=sys.stderr)
        return 1


def _qa_publish(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .publish import publish

    s3 = f"s3://{args.s3[0]}/{args.s3[1]}" if args.s3 else None
    code, line = publish(args.report, s3, args.endpoint_url, args.region, args.textfile)
    print(line if code == 0 else f"{PROG}: error: {line}", file=sys.stdout if code == 0 else sys.stderr)
    return code


def _switch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .live import Live, Server, read_header, switch_to
    from .manifest import SyncError

    models = server_models(args, parser)
    try:
        header = read_header(args.header_file) if args.header_file else None
        live = Live([Server(n, u, models.get(n)) for n, u in args.server], header, args.timeout) \
            if args.server else None
        before, outcome = switch_to(args.dest, args.to, live)
    except (SyncError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    reloaded = f"; reloaded {len(outcome.loaded)}, unloaded {len(outcome.unloaded)}" if outcome else ""
    print(f"{args.dest}/current: {before or '-'} -> {args.to}{reloaded}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.run(args, args.parser)


if __name__ == "__main__":
    sys.exit(main())
