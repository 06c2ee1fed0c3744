"""Rolling rollout of a change over a fleet (``tritonfleet rollout``, ``make rollout``), with gates and
rollback, so a bad change never takes the fleet down.

Order: the first ``canary`` hosts, then batches of ``batch`` hosts (in parallel within a batch). Per host:

1. record what it serves (each server's spec from its host record, the model version ``current`` points
   at): the rollback point;
2. take it out of the load balancer (ELBv2 target group, when one is given) and wait for draining;
3. apply ``deploys/serve.py`` to it (its own health gate included);
4. QA gate: ``deploys/qa.py`` when the host has QA suites (``qa_suites``);
5. on a failure: ``deploys/rollback.py`` with the recorded point (containers back to their recorded spec,
   models back to their kept version), then check that it serves again; the failure is counted;
6. back into the target group, waiting until it is healthy.

A host's status: ``updated``; ``rolled back`` (a step failed, the recorded point serves again); ``rollback
failed`` (it does not serve again: it stays out of the load balancer); ``out of the load balancer`` (it serves,
but its targets never became healthy again); ``not changed`` (its point could not be recorded or it could not
leave the load balancer: nothing was applied); ``not started``. Every status but ``updated`` and ``not
started`` is a failure. New batches stop once the failed hosts exceed ``fail_percent`` of the fleet. A summary
table is printed and ``<reports>/rollout-<UTC stamp>.json`` written; progress lines go to this module's logger
at INFO (the command line shows them on stderr). The exit code is non-zero when a host failed or the rollout
stopped early.

One rollout at a time per reports directory: ``<reports>/.rollout.lock`` (flock, with the holder's pid) is
held for the whole run, and a second rollout ends at once with one line naming the first.

Interruption: pyinfra runs in sessions of their own, so Ctrl-C (SIGINT) reaches only the rollout, which
starts nothing new, lets the hosts in flight finish their step sequence, and reports. If the rollout
itself is killed (SIGKILL), the pyinfra runs in flight still finish (each host ends on the old or the new
version, serving); their process ids are in ``<reports>/.rollout-running.json`` and the next rollout
waits for them before it starts.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tritonfleet import hostcontract as hc

#: Progress lines (a batch starts, a host's outcome, a rollback) at INFO; the CLI shows them on stderr.
logger = logging.getLogger(__name__)

DEFAULT_MODELS_DIR = "/opt/tritonfleet/models"
# How long a pyinfra run that overran --step-timeout gets after SIGTERM before its group is killed.
TERM_GRACE = 30.0
# Statuses that are no failure; every other final status is one (a new status counts unless listed here).
NOT_FAILED = ("updated", "not started", "pending")


class RolloutError(Exception):
    """Bad options or an inventory the rollout cannot use (one line)."""


@dataclass
class Options:
    inventory: str
    batch: int = 1
    canary: int = 1
    fail_percent: float = 0.0
    target_group: str | None = None
    region: str | None = None
    deploy: str = "deploys/serve.py"
    reports_dir: str = "reports"
    limit: list[str] | None = None
    step_timeout: float = 1800
    lb_timeout: float = 600  # seconds a host may take to drain, and to be healthy again, in the target group
    lb_delay: float = 5  # seconds between two looks at the target group
    root: str = "."  # where deploys/ live (the project checkout)


@dataclass
class HostResult:
    host: str
    status: str = "pending"  # "updated", "rolled back", "rollback failed", "out of the load balancer",
    #                          "not changed", "not started" (module docstring)
    failed_step: str | None = None
    message: str = ""
    point: dict = field(default_factory=dict)
    seconds: float = 0.0
    batch: int = 0


class Runner:
    """Runs pyinfra for one host at a time, each in a session of its own (see the module docstring)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.pyinfra = str(Path(sys.executable).parent / "pyinfra")
        self.running: dict[int, str] = {}
        self._lock = threading.Lock()
        self.state_file = Path(opts.reports_dir) / ".rollout-running.json"

    def _save(self) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({str(pid): h for pid, h in self.running.items()}))
        os.replace(tmp, self.state_file)

    def run(self, deploy: str, host: str, data: dict[str, str] | None = None) -> tuple[bool, str]:
        cmd = [self.pyinfra, "-y", self.opts.inventory, deploy, "--limit", host]
        for key, value in (data or {}).items():
            cmd += ["--data", f"{key}={value}"]
        env = {**os.environ, "PYINFRA_PROGRESS": "off"}
        proc = subprocess.Popen(cmd, cwd=self.opts.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        logger.debug("%s: %s started (pid %d)%s", host, deploy, proc.pid,
                     f" with {', '.join(data)}" if data else "")
        with self._lock:
            self.running[proc.pid] = host
            self._save()
        try:
            out, _ = proc.communicate(timeout=self.opts.step_timeout)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.communicate(timeout=TERM_GRACE)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=TERM_GRACE)
            return False, f"{deploy} took longer than {self.opts.step_timeout:.0f}s"
        finally:
            with self._lock:
                self.running.pop(proc.pid, None)
                self._save()
        logger.debug("%s: %s exited %d", host, deploy, proc.returncode)
        return proc.returncode == 0, _reason(out)

    def wait_for_leftovers(self, timeout: float = 1800) -> list[str]:
        """Wait for pyinfra runs a killed rollout left behind; the hosts they were on."""
        try:
            left = {int(pid): host for pid, host in json.loads(self.state_file.read_text()).items()}
        except (OSError, ValueError):
            return []
        deadline = time.monotonic() + timeout
        alive = [pid for pid in left if _alive(pid)]
        while alive and time.monotonic() < deadline:
            time.sleep(1)
            alive = [pid for pid in alive if _alive(pid)]
        if alive:
            raise RolloutError(f"pyinfra runs of an earlier rollout still running: pids {alive}")
        return sorted(set(left.values()))


def _signal_group(pid: int, sig: int) -> None:
    """Signal a run's process group; a group that has already gone is no error."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


class ReportsLock:
    """``<reports>/.rollout.lock``: one rollout at a time against a reports directory (flock; released
    by the kernel when the holder dies, so a killed rollout leaves no stale lock)."""

    def __init__(self, reports_dir: str) -> None:
        self.path = Path(reports_dir) / ".rollout.lock"
        self.fd: int | None = None

    def __enter__(self) -> ReportsLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RolloutError(f"another rollout is running against {self.path.parent}/ ({holder}); wait for it "
                               "or use another --reports directory") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _reason(output: str) -> str:
    """The lines of a pyinfra run that say why it failed (errors, not the whole log)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    keep = [line for line in lines if "ERROR" in line or "rror:" in line or "failed" in line.lower()
            or "QA failed" in line]
    return " | ".join((keep or lines)[-4:])[:600]


def rollback_point(name: str, data: dict) -> dict:
    """What the host serves now: ``{"servers": {name: spec}, "models_version": id | None}``."""
    from tritonfleet.access.ssh import connect

    session = connect(name, data)
    try:
        current = shlex.quote(f"{data.get('models_dir') or DEFAULT_MODELS_DIR}/current")
        rc, out, err = session.run(
            f"for f in {hc.SERVERS_DIR}/*.json; do [ -f \"$f\" ] || continue; echo '@@record'; cat \"$f\"; done; "
            f"echo '@@models'; readlink {current} || true", root=True)
        if rc != 0:
            raise RolloutError(f"{name}: cannot read its host records: {err.strip()[:200]}")
        servers, version = {}, None
        for section in out.split("@@")[1:]:
            head, _, body = section.partition("\n")
            if head == "record":
                record = hc.ServerRecord.from_json(body)
                if record is not None:
                    servers[record.name] = record.spec
            elif head == "models" and body.strip():
                version = body.strip().rsplit("/", 1)[-1]
        logger.debug("%s: rollback point: servers %s, models version %s", name, servers, version)
        return {"servers": servers, "models_version": version}
    finally:
        session.close()


def serving(name: str, data: dict, timeout: float = 120) -> tuple[bool, str]:
    """(every server of the host serves, what the last look saw), asking Docker and Triton through the
    reader ``tritonfleet status`` renders (:func:`tritonfleet.access.health.read_host`) until they do or
    ``timeout`` passes."""
    from tritonfleet.access import health

    deadline = time.monotonic() + timeout
    while True:
        seen = health.read_host(name, data)
        if seen.serving:
            return True, ""
        if time.monotonic() > deadline:
            return False, seen.seen()
        logger.debug("%s: not serving yet: %s", name, seen.seen())
        time.sleep(3)


def plan(hosts: list[str], canary: int, batch: int) -> list[list[str]]:
    """Batches in order: the canary hosts first, then groups of ``batch``."""
    if batch < 1 or canary < 0:
        raise RolloutError("batch must be >= 1 and canary >= 0")
    first, rest = hosts[:canary], hosts[canary:]
    return ([first] if first else []) + [rest[i:i + batch] for i in range(0, len(rest), batch)]


class Rollout:
    """One rollout over the hosts of an inventory (see the module docstring)."""

    def __init__(self, opts: Options, hosts: list[tuple[str, dict]], lb=None) -> None:
        self.opts = opts
        self.hosts = dict(hosts)
        self.order = [name for name, _ in hosts]
        self.lb = lb  # tritonfleet.fleet.lb.TargetGroup or None
        self.runner = Runner(opts)
        self.stop_requested = False
        self.results: dict[str, HostResult] = {name: HostResult(name) for name in self.order}

    # -- one host ---------------------------------------------------------------------------------------

    def roll(self, name: str, batch: int) -> HostResult:
        r = self.results[name]
        r.batch = batch
        started = time.monotonic()
        try:
            self._roll(r, self.hosts[name])
        except Exception as exc:  # one host's trouble is its row, not the end of the rollout
            r.status = "rollback failed" if r.status in NOT_FAILED else r.status
            r.failed_step = r.failed_step or "rollout"
            r.message = _join(r.message, f"{type(exc).__name__}: {exc}")
        r.seconds = round(time.monotonic() - started, 1)
        logger.info(f"{name}: {r.status}" + (f" ({r.failed_step})" if r.failed_step else "") + f" in {r.seconds}s")
        return r

    def _roll(self, r: HostResult, data: dict) -> None:
        name = r.host
        try:  # before anything changes: what to go back to
            r.point = rollback_point(name, data)
        except Exception as exc:
            r.status, r.failed_step, r.message = "not changed", "record", _one_line(exc)
            return
        if self.lb:
            try:
                self.lb.take_out(name, data)
            except Exception as exc:
                r.status, r.failed_step, r.message = "not changed", "take out", _one_line(exc)
                self._put_back(r, data)  # it may have left the group: back in, nothing changed on it
                return
        step, ok, why = "serve", *self._step(self.opts.deploy, name)
        if ok and data.get("qa_suites"):
            step, ok, why = "qa", *self._step("deploys/qa.py", name)
        if ok:
            r.status = "updated"
        else:
            r.failed_step, r.message = step, why
            logger.info(f"{name}: {step} failed, rolling back: {why}")
            rb_ok, rb_why = self._step("deploys/rollback.py", name,
                                       {"rollback_point": json.dumps(r.point, separators=(",", ":"))})
            back, seen = serving(name, data) if rb_ok else (False, "")
            r.status = "rolled back" if back else "rollback failed"
            if not back:
                r.message += f" | rollback: {rb_why if not rb_ok else 'the host does not serve: ' + seen}"
        if self.lb and r.status != "rollback failed":  # a host that does not serve stays out
            self._put_back(r, data)

    def _step(self, deploy: str, name: str, data: dict[str, str] | None = None) -> tuple[bool, str]:
        """One pyinfra run; a run that cannot even start is a failed step, not the end of the host."""
        try:
            return self.runner.run(deploy, name, data)
        except Exception as exc:
            return False, _one_line(exc)

    def _put_back(self, r: HostResult, data: dict) -> None:
        """Back into the load balancer; targets that never become healthy make the host a failure of its own."""
        try:
            self.lb.put_back(r.host, data)
        except Exception as exc:
            r.status = "out of the load balancer"
            r.failed_step = r.failed_step or "put back"
            r.message = _join(r.message, f"put back: {_one_line(exc)}")
            logger.info(f"{r.host}: not healthy in the load balancer: {_one_line(exc)}")

    # -- the fleet --------------------------------------------------------------------------------------

    def failures(self) -> int:
        return sum(1 for r in self.results.values() if r.status not in NOT_FAILED)

    def run(self) -> dict:
        leftovers = self.runner.wait_for_leftovers()
        if leftovers:
            logger.info(f"waited for the runs an earlier rollout left on {', '.join(leftovers)}")
        batches = plan(self.order, self.opts.canary, self.opts.batch)
        total = len(self.order)
        stopped = None
        for i, batch in enumerate(batches, 1):
            if self.stop_requested:
                stopped = "interrupted"
                break
            logger.info(f"batch {i}/{len(batches)}{' (canary)' if i == 1 and self.opts.canary else ''}: {', '.join(batch)}")
            with ThreadPoolExecutor(max_workers=len(batch)) as pool:
                list(pool.map(lambda h, b=i: self.roll(h, b), batch))
            if self.failures() * 100 > self.opts.fail_percent * total:
                if i < len(batches):
                    stopped = (f"{self.failures()} of {total} hosts failed (over fail_percent "
                               f"{self.opts.fail_percent:g}%): no further batches")
                break
        for r in self.results.values():
            if r.status == "pending":
                r.status = "not started"
        return {"inventory": self.opts.inventory, "deploy": self.opts.deploy,
                "batch": self.opts.batch, "canary": self.opts.canary, "fail_percent": self.opts.fail_percent,
                "stopped": stopped, "failures": self.failures(), "hosts": [asdict(self.results[n]) for n in self.order]}


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:600]


def _join(first: str, second: str) -> str:
    return (f"{first} | {second}" if first else second)[:600]


def write_report(report: dict, reports_dir: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = Path(reports_dir) / f"rollout-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def print_summary(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rollout", title_justify="left")
    for col in ("host", "batch", "status", "failed step", "seconds", "why"):
        table.add_column(col)
    for h in report["hosts"]:
        style = {"updated": None, "not started": "dim"}.get(h["status"], "red")
        table.add_row(h["host"], str(h["batch"] or "-"), h["status"], h["failed_step"] or "-", f"{h['seconds']:.0f}",
                      (h["message"] or "")[:120], style=style)
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    if report["stopped"]:
        console.print(f"[red]stopped: {report['stopped']}[/red]")


def main(opts: Options) -> int:
    """Run a rollout; 0 when every host was updated. Progress goes to this module's logger (INFO)."""
    from tritonfleet.access.inventory import load_inventory

    hosts = load_inventory(opts.inventory)
    if opts.limit:
        unknown = sorted(set(opts.limit) - {n for n, _ in hosts})
        if unknown:
            raise RolloutError(f"--limit: not in {opts.inventory}: {', '.join(unknown)}")
        hosts = [(n, d) for n, d in hosts if n in opts.limit]
    if not hosts:
        raise RolloutError(f"{opts.inventory}: no hosts")
    lb = None
    if opts.target_group:
        from tritonfleet.fleet.lb import TargetGroup, TargetGroupError

        try:
            lb = TargetGroup(opts.target_group, opts.region, delay=opts.lb_delay,
                             attempts=max(1, round(opts.lb_timeout / opts.lb_delay)))
            lb.check(hosts)
        except TargetGroupError as exc:
            raise RolloutError(str(exc)) from None
    with ReportsLock(opts.reports_dir):
        rollout = Rollout(opts, hosts, lb)
        previous = signal.signal(signal.SIGINT, lambda *_: _interrupt(rollout))
        try:
            report = rollout.run()
        finally:
            signal.signal(signal.SIGINT, previous)
        path = write_report(report, opts.reports_dir)
    print_summary(report)
    logger.info(f"report: {path}")
    return 0 if not report["failures"] and not report["stopped"] else 1


def _interrupt(rollout: Rollout) -> None:
    rollout.stop_requested = True
    logger.info("interrupted: the hosts in flight finish their steps; no new batch starts")
