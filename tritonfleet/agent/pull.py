"""``tritonfleet-agent pull``: the resident agent of pull mode (``models_pull``, README "Model repositories").

The agent runs as ``tritonfleet-models-pull.service`` and watches a release pointer in S3: a small object below
the release root ``--source s3://BUCKET/PREFIX`` that names the release to serve::

    s3://BUCKET/PREFIX/RELEASE            the fleet's pointer
    s3://BUCKET/PREFIX/RELEASE.<group>    a host group's pointer (--group), e.g. the canary's
    s3://BUCKET/PREFIX/<release>/...      each release: a Triton model repository

A pointer's first non-blank line is the release, relative to the root (``v2``, ``releases/2026-11-27``) or as
a full ``s3://`` URI below it; the lines after it are free text (``tritonfleet models release`` writes who
released it and when). A host with ``--group`` follows its group's pointer, and the fleet's while the group
has none.

Every ``--interval`` seconds the agent asks for the pointer with ``If-None-Match`` (the ETag it last read):
an unchanged pointer is one request, answered 304, and nothing else happens: no process starts, no listing.
A changed pointer naming another release runs the sync (``sync.py``) on ``s3://BUCKET/PREFIX/<release>/``,
in this process: download what changed, check it, switch ``current`` atomically and reload the changed models
live on the servers (``--server``), which switch back when a model fails to load. Every other sync option
(``--compat``, ``--server-capacity``, the timeouts) is the sync's.

A failure (a pointer naming a release that is missing, empty or broken, a model that does not load, S3 out of
reach) leaves ``current`` and the servers as they were: the host keeps serving the release it served. The
agent tries again after a back-off that doubles from ``--interval`` up to ``--max-backoff`` seconds, and at
once when the pointer changes again (a fixed or rolled-back release). A killed agent (SIGKILL, a reboot)
leaves ``current`` at a complete version; systemd starts it again and its first pass finishes the work
(``sync.py``: leftovers are reused, an owed reload is done).

What it reports, after every check:

- ``--state FILE`` (JSON, 0644, for ``tritonfleet status``): ``release`` (what ``current`` serves), ``source``,
  ``pointer`` (the pointer object in effect), ``pointed`` (the release it names), ``version`` (the local
  version id), ``last_check``, ``last_change``, ``last_error``, ``failures`` (in a row), ``next_check``,
  ``interval``, ``pid``, ``updated``;
- ``--textfile-dir DIR``: ``tritonfleet_models_pull.prom`` for node_exporter (:func:`metrics_text`).

``--once``: one pass, then exit 0 when the host serves the pointed release, 1 when it does not (the error on
stderr); with ``--dry-run --json`` it prints the sync's dry run of the pointed release, with ``release``
added (what the models role's no-op check reads). Standard library and boto3 only, Python 3.9.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .remote import make_client
from .sync import Options, Result, run
from .watchdog import escape_label, write_textfile

logger = logging.getLogger(__name__)

POINTER = "RELEASE"
STATE_FILE = "/var/lib/tritonfleet/models-pull.json"
TEXTFILE = "tritonfleet_models_pull.prom"
POINTER_LIMIT = 1024  # bytes a pointer may have
GROUP = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_COMPONENT = re.compile(r"[A-Za-z0-9._-]+")
DEFAULT_INTERVAL = 2.0
DEFAULT_MAX_BACKOFF = 300.0


class PointerError(ValueError):
    """A pointer that names no release this agent may sync; ``str(e)`` is one line."""


def parse_pointer(body: bytes, bucket: str, prefix: str) -> str:
    """The release a pointer's ``body`` names, relative to the root ``s3://bucket/prefix`` (``prefix`` "" or
    ending in "/"): its first non-blank line, a relative path or an ``s3://`` URI below the root."""
    if len(body) > POINTER_LIMIT:
        raise PointerError(f"the pointer has {len(body)} bytes (at most {POINTER_LIMIT}): not a release pointer")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise PointerError("the pointer is not UTF-8 text") from None
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    if not line:
        raise PointerError("the pointer is empty: its first line names the release, e.g. v2")
    name = line
    if line.startswith("s3://"):
        root = f"s3://{bucket}/{prefix}"
        if not line.startswith(root) or len(line) == len(root):
            raise PointerError(f"the pointer names {line}, which is not below the release root {root}")
        name = line[len(root):]
    name = name.rstrip("/")
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") or not _COMPONENT.fullmatch(p) for p in parts):
        raise PointerError(f"the pointer names {line!r}: expected a release like v2 or releases/2026-11-27 "
                           "(letters, digits, . _ - and /)")
    if parts[0].startswith(POINTER):
        raise PointerError(f"the pointer names {line!r}, which is a pointer, not a release")
    return name


def pointer_key(prefix: str, group: str | None = None) -> str:
    return prefix + POINTER + (f".{group}" if group else "")


def backoff(failures: int, interval: float, max_backoff: float) -> float:
    """Seconds to the next try after ``failures`` failed tries in a row: ``interval`` doubled per failure,
    never over ``max_backoff`` (and never under ``interval``)."""
    if failures <= 0:
        return interval
    return max(interval, min(max_backoff, interval * 2.0 ** min(failures, 30)))


@dataclass
class State:
    """What the agent leaves in ``--state`` (module docstring)."""

    release: str | None = None
    source: str | None = None
    pointer: str | None = None
    pointed: str | None = None
    version: str | None = None
    last_check: float | None = None
    last_change: float | None = None
    last_error: str | None = None
    failures: int = 0
    next_check: float | None = None
    interval: float = DEFAULT_INTERVAL
    pid: int = 0
    updated: float | None = None

    @classmethod
    def load(cls, path: str) -> State:
        """The state a previous agent left (what it served), or an empty one."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return cls()
        if not isinstance(data, dict):
            return cls()
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        try:
            return cls(**known)
        except TypeError:
            return cls()


def metrics_text(s: State) -> str:
    """The textfile for node_exporter."""
    lines = ["# HELP tritonfleet_models_release_info The release the host's model repository serves (pull mode).",
             "# TYPE tritonfleet_models_release_info gauge"]
    if s.release:
        lines.append(f'tritonfleet_models_release_info{{release="{escape_label(s.release)}",'
                     f'pointer="{escape_label(s.pointer or POINTER)}"}} 1')
    lines += ["# HELP tritonfleet_models_release_pointed_info The release the pointer in effect names.",
              "# TYPE tritonfleet_models_release_pointed_info gauge"]
    if s.pointed:
        lines.append(f'tritonfleet_models_release_pointed_info{{release="{escape_label(s.pointed)}"}} 1')
    behind = int(bool(s.pointed) and s.pointed != s.release)
    lines += ["# HELP tritonfleet_models_release_behind 1 while the pointer names a release the host does not serve.",
              "# TYPE tritonfleet_models_release_behind gauge", f"tritonfleet_models_release_behind {behind}",
              "# HELP tritonfleet_models_release_failures Failed tries in a row to serve the pointed release.",
              "# TYPE tritonfleet_models_release_failures gauge", f"tritonfleet_models_release_failures {s.failures}"]
    for name, value, what in (("last_check", s.last_check, "the last pointer check"),
                              ("last_change", s.last_change, "the last change of the served release")):
        metric = f"tritonfleet_models_release_{name}_timestamp_seconds"
        lines += [f"# HELP {metric} Unix time of {what}.", f"# TYPE {metric} gauge"]
        if value is not None:
            lines.append(f"{metric} {value:.3f}")
    return "\n".join(lines) + "\n"


@dataclass
class Pointer:
    """One pointer object and what the agent last read of it."""

    key: str
    etag: str | None = None
    release: str | None = None  # what its body names (None: not read, missing or broken)
    missing: bool = False
    error: str | None = None  # a body that names no release


@dataclass
class Check:
    """One pass: what the pointer said and what the agent did."""

    requests: int = 0
    changed: bool = False  # a pointer answered with a new body (200)
    action: str = "none"  # "none" (nothing to do), "synced", "failed", "no-release"
    result: Result | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class Watcher:
    """The pull loop's state and one pass of it (:meth:`check`); :meth:`run` is the loop."""

    options: Options  # the sync's options; ``prefix`` is the release root's
    group: str | None = None
    live: Any = None  # live.Live: the servers to reload
    state_path: str | None = None
    textfile_dir: str | None = None
    interval: float = DEFAULT_INTERVAL
    max_backoff: float = DEFAULT_MAX_BACKOFF
    clock: Callable[[], float] = time.time
    client: Any = None
    state: State = field(default_factory=State)
    pointers: list = field(default_factory=list)
    synced_once: bool = False  # this process has synced the pointed release (a restart syncs once)
    sync_failed: str | None = None  # the release whose sync failed last (its back-off applies to it only)
    read_failed: bool = False  # the last pointer request failed (S3 out of reach): the next waits its back-off

    def __post_init__(self) -> None:
        root = self.options.prefix
        self.pointers = ([Pointer(pointer_key(root, self.group))] if self.group else []) + [Pointer(pointer_key(root))]
        self.state.interval = self.interval

    @property
    def root(self) -> str:
        return f"s3://{self.options.bucket}/{self.options.prefix}"

    def _s3(self) -> Any:
        if self.client is None:
            self.client = make_client(self.options)
        return self.client

    def _read(self, p: Pointer, check: Check) -> None:
        """One conditional GET of ``p``: 304 keeps what was read, 200 reads the body, 404 marks it missing."""
        from botocore.exceptions import ClientError

        kwargs = {"Bucket": self.options.bucket, "Key": p.key}
        if p.etag and not p.missing:
            kwargs["IfNoneMatch"] = p.etag
        check.requests += 1
        try:
            obj = self._s3().get_object(**kwargs)
        except ClientError as exc:
            err = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 304 or err.get("Code") in ("304", "NotModified"):
                return
            if status == 404 or err.get("Code") in ("NoSuchKey", "404"):
                if not p.missing:
                    check.changed = True
                p.missing, p.etag, p.release, p.error = True, None, None, None
                return
            raise
        body = obj["Body"].read(POINTER_LIMIT + 1)
        check.changed = True
        p.missing, p.etag = False, obj.get("ETag")
        try:
            p.release, p.error = parse_pointer(body, self.options.bucket, self.options.prefix), None
        except PointerError as exc:
            p.release, p.error = None, f"{self.root}{p.key[len(self.options.prefix):]}: {exc}"

    def _in_effect(self, check: Check) -> Pointer:
        """The pointer that decides: the group's while it exists, else the fleet's (read only when needed)."""
        for p in self.pointers:
            self._read(p, check)
            if not p.missing:
                return p
        return self.pointers[-1]

    def check(self, *, dry_run: bool = False) -> Check:
        """One pass: read the pointer; sync when it names a release this host does not serve, or when this
        process has not synced yet, or after a failure once its back-off has passed."""
        started = time.monotonic()
        check = Check()
        s = self.state
        now = s.last_check = self.clock()
        try:
            p = self._in_effect(check)
        except Exception as exc:  # S3 out of reach: nothing changes on the host
            from .remote import describe

            check.action, check.error = "failed", f"reading the release pointer: {describe(exc, None)}"
            self.read_failed = True
            self._failed(check, now)
            return self._done(check, started)
        self.read_failed = False
        s.pointer = p.key[len(self.options.prefix):]
        if p.missing:
            check.action = "no-release"
            check.error = (f"no release pointer at {self.root}{POINTER}"
                           + (f" (nor {POINTER}.{self.group})" if self.group else "")
                           + ": release one with `tritonfleet models release`")
            s.pointed, self.sync_failed = None, None
            self._failed(check, now, count=False)
            return self._done(check, started)
        if p.error:
            check.action, check.error = "failed", p.error
            s.pointed, self.sync_failed = None, None
            self._failed(check, now, count=check.changed or s.failures == 0)
            return self._done(check, started)
        s.pointed = release = p.release or ""
        # a failed sync of this release waits its back-off (unless the pointer changed); any other failure
        # (S3 out of reach, a bad pointer) is over once the pointer reads well
        due = check.changed or self.sync_failed != release or (s.next_check is not None and now >= s.next_check)
        if not dry_run and self.synced_once and s.release == release and self.sync_failed != release:
            check.action = "none"
            s.failures, s.last_error, s.next_check = 0, None, now + self.interval
            return self._done(check, started)
        if not dry_run and not due:
            check.action = "none"
            return self._done(check, started)
        source = self.options.prefix + release + "/"
        if self.live is not None:  # one Live for every sync: the last one's outcome is not this one's
            self.live.reset()
        result = run(replace(self.options, prefix=source, dry_run=dry_run), None, self.live)
        check.result = result
        if result.status == "failed":
            refused = (result.compat or {}).get("refused")
            why = "; ".join(refused) if refused else (result.error or "failed")
            check.action, check.error = "failed", f"release {p.release}: {why}"
            if not dry_run:
                self.sync_failed = release
                self._failed(check, now)
            return self._done(check, started)
        check.action = "dry-run" if dry_run else "synced"
        if not dry_run:
            done = self.clock()  # the switch: after the sync, which may take minutes
            if s.release != release or (result.status in ("synced", "switched") and s.version != result.version):
                s.last_change = done
            s.release, s.source, s.version = release, f"s3://{self.options.bucket}/{source}", result.version
            s.failures, s.last_error, s.next_check = 0, None, done + self.interval
            self.synced_once, self.sync_failed = True, None
        return self._done(check, started)

    def _failed(self, check: Check, now: float, count: bool = True) -> None:
        s = self.state
        if count:
            s.failures += 1
        s.last_error = check.error
        s.next_check = now + backoff(s.failures, self.interval, self.max_backoff)

    def _done(self, check: Check, started: float) -> Check:
        check.seconds = time.monotonic() - started
        s = self.state
        s.pid, s.updated = os.getpid(), self.clock()
        self.save()
        return check

    def save(self) -> None:
        """The state file and the textfile (each only where given); a write that fails is logged, not fatal."""
        try:
            if self.state_path:
                write_textfile(self.state_path, json.dumps(asdict(self.state), sort_keys=True) + "\n", durable=False)
            if self.textfile_dir:
                write_textfile(os.path.join(self.textfile_dir, TEXTFILE), metrics_text(self.state), durable=False)
        except OSError as exc:
            logger.warning("cannot write the pull state: %s", exc)

    def run(self, stop: threading.Event, report: Callable[[Check], None] = lambda c: None,
            passes: int | None = None) -> None:
        """Check, act, report and wait, until ``stop`` is set (or ``passes`` passes, for tests)."""
        n = 0
        while not stop.is_set() and (passes is None or n < passes):
            check = self.check()
            report(check)
            n += 1
            stop.wait(self.wait())

    def wait(self) -> float:
        """Seconds to the next pass: the interval; after a pointer request that failed (S3 out of reach), what
        is left of its back-off (a failed sync does not slow the pointer down: a new one is taken at once)."""
        if self.read_failed and self.state.next_check is not None:
            return max(self.interval, self.state.next_check - self.clock())
        return self.interval
