"""``tritonfleet-agent``: the host-side agent's command line (what ``sync`` does: ``sync.py``'s docstring).

Exit codes: 0 done, 1 the sync failed, 2 bad arguments; every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from dataclasses import asdict
from urllib.parse import urlsplit

from .sync import Options, Progress, Result, parse_source, run

PROG = "tritonfleet-agent"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line (argparse's own also prints the usage)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _whole(lo: int, hi: int):
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{n} is not within {lo} to {hi}")
        return n
    return parse


def _source(text: str) -> tuple[str, str]:
    try:
        return parse_source(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _endpoint(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.username or parts.password:
        raise argparse.ArgumentTypeError(f"not an http(s) URL without credentials: {text!r}")
    return text


def _region(text: str) -> str:
    if not re.match(r"^[a-z]{2,}(-[a-z0-9]+)+$", text):
        raise argparse.ArgumentTypeError(f"not a region name: {text!r}")
    return text


def _server(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    parts = urlsplit(url)
    if not sep or not re.match(r"^[A-Za-z0-9_.-]+$", name) or parts.scheme not in ("http", "https") \
            or not parts.netloc or parts.username or parts.password:
        raise argparse.ArgumentTypeError(f"expected NAME=http://HOST:PORT, got {text!r}")
    return name, url.rstrip("/")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Host-side agent of tritonfleet.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    sync = commands.add_parser("sync", help="sync the model repository from S3 into a directory",
                               description="Sync a Triton model repository from S3 into DIR/versions/<id>, "
                                           "then switch DIR/current to it.")
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
                      help="a Triton server (explicit model control) to reload after the switch; repeatable")
    sync.add_argument("--header-file", metavar="FILE",
                      help="the restricted-API header for the servers, one line 'name: value' (mode 0600)")
    sync.add_argument("--timeout", type=_whole(1, 3600), default=180, metavar="S",
                      help="seconds to wait for a server to be ready, and for each model load (default 180)")
    sync.set_defaults(run=_sync, parser=sync)
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


def _size(n: int) -> str:
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


def _sync(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if os.path.exists(args.dest) and not os.path.isdir(args.dest):
        parser.error(f"--dest {args.dest}: not a directory")
    bucket, prefix = args.source
    opts = Options(bucket=bucket, prefix=prefix, dest=args.dest, endpoint_url=args.endpoint_url,
                   region=args.region, path_style=args.path_style, concurrency=args.concurrency, keep=args.keep,
                   retries=args.retries, allow_empty=args.allow_empty, dry_run=args.dry_run,
                   durable=not args.no_fsync)
    live = None
    if args.server:
        from .live import Live, Server, read_header
        from .manifest import SyncError

        try:
            header = read_header(args.header_file) if args.header_file else None
        except SyncError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 1
        live = Live([Server(n, u) for n, u in args.server], header, args.timeout)
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
        print(f"{PROG}: error: {result.error}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.run(args, args.parser)


if __name__ == "__main__":
    sys.exit(main())
