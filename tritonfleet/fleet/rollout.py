"""Rolling rollout of a change over a fleet (``tritonfleet rollout``, ``make rollout``), with gates and
rollback, so a bad change never takes the fleet down.

Order: the first ``canary`` hosts, then batches of ``batch`` hosts (in parallel within a batch). Per host:

1. record what it serves (each server's spec from its host record, the model version ``current`` points
   at): the rollback point;
2. take it out of the load balancer (``--lb``: an ELBv2 target group or the HAProxy of the ``lb`` group,
   :mod:`tritonfleet.fleet.lb`) and wait for draining;
3. apply ``deploys/serve.py`` to it (its own health gate included);
4. QA gate: ``deploys/qa.py`` when the host has QA suites (``qa_suites``);
5. on a failure: ``deploys/rollback.py`` with the recorded point (containers back to their recorded spec,
   models back to their kept version), then check that it serves again; the failure is counted;
6. back into the load balancer, waiting until it is healthy.

Traffic canary (``canary_weight``, with ``prometheus``): once every canary host is updated and back, the load
balancer sends ``canary_weight`` % of the requests to them for ``bake`` seconds, then the gates
(:mod:`tritonfleet.fleet.gates`) compare their servers' error ratio and latency per request with the other hosts'
over that window. A breach (or gates that cannot be evaluated) takes the canary hosts out, restores the weights,
rolls them back (step ``canary gate``, the message naming the metric, the values and the window) and starts no
further batch; a pass restores the weights, puts the canary hosts back among the others and goes on. The
verdict is the report's ``traffic_canary``. Everything a traffic canary needs is checked by :func:`validate`
before anything changes.

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
from typing import Any

from tritonfleet import hostcontract as hc

#: Progress lines (a batch starts, a host's outcome, a rollback) at INFO; the CLI shows them on stderr.
logger = logging.getLogger(__name__)

DEFAULT_MODELS_DIR = "/opt/tritonfleet/models"
# How long a pyinfra run that overran --step-timeout gets after SIGTERM before its group is killed.
TERM_GRACE = 30.0
# Statuses that are no failure; every other final status is one (a new status counts unless listed here).
NOT_FAILED = ("updated", "not started", "pending")


#: Bake seconds of a traffic canary when none is given.
DEFAULT_BAKE = 120.0
LB_KINDS = ("elbv2", "haproxy")


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
    lb_timeout: float = 600  # seconds a host may take to drain, and to be healthy again, in the load balancer
    lb_delay: float = 5  # seconds between two looks at the load balancer
    root: str = "."  # where deploys/ live (the project checkout)
    lb: str | None = None  # "elbv2", "haproxy"; None: elbv2 when target_group is given, else no load balancer
    listener_arn: str | None = None  # elbv2 traffic canary: the listener whose default action forwards ...
    rule_arn: str | None = None  # ... or the listener rule that does
    canary_target_group: str | None = None  # elbv2 traffic canary: the canary hosts' target group
    canary_weight: int | None = None  # percent of the requests to the canary hosts during the bake; None: no bake
    bake: float | None = None  # seconds of the traffic canary (DEFAULT_BAKE when None)
    prometheus: str | None = None  # the Prometheus the gates ask (its URL)
    max_error_ratio: float = 0.01  # the canary's error ratio above which it fails (absolute)
    max_latency_ratio: float = 1.5  # the canary's latency per request above this times the others' fails it

    @property
    def lb_kind(self) -> str | None:
        return self.lb or ("elbv2" if self.target_group else None)


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
        self.lb = lb  # a tritonfleet.fleet.lb.LoadBalancer (TargetGroup, HAProxy) or None
        self.runner = Runner(opts)
        self.stop_requested = False
        self.results: dict[str, HostResult] = {name: HostResult(name) for name in self.order}
        self.traffic: dict | None = None  # the traffic canary's record (the report's traffic_canary)
        self.sleep, self.clock = time.sleep, time.monotonic  # the bake's (tests replace them)

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
            self._rollback(r, data, step, why)
        if self.lb and r.status != "rollback failed":  # a host that does not serve stays out
            self._put_back(r, data)

    def _rollback(self, r: HostResult, data: dict, step: str, why: str) -> None:
        """Back to the recorded point; the host's status says whether it serves again."""
        name = r.host
        r.failed_step, r.message = step, why
        logger.info(f"{name}: {step} failed, rolling back: {why}")
        rb_ok, rb_why = self._step("deploys/rollback.py", name,
                                   {"rollback_point": json.dumps(r.point, separators=(",", ":"))})
        back, seen = serving(name, data) if rb_ok else (False, "")
        r.status = "rolled back" if back else "rollback failed"
        if not back:
            r.message += f" | rollback: {rb_why if not rb_ok else 'the host does not serve: ' + seen}"

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
            if i == 1 and self.opts.canary and self.opts.canary_weight is not None and i < len(batches):
                stopped = self.traffic_canary(batch)
                if stopped:
                    break
            if self.failures() * 100 > self.opts.fail_percent * total:
                if i < len(batches):
                    stopped = (f"{self.failures()} of {total} hosts failed (over fail_percent "
                               f"{self.opts.fail_percent:g}%): no further batches")
                break
        for r in self.results.values():
            if r.status == "pending":
                r.status = "not started"
        report = {"inventory": self.opts.inventory, "deploy": self.opts.deploy,
                  "batch": self.opts.batch, "canary": self.opts.canary, "fail_percent": self.opts.fail_percent,
                  "stopped": stopped, "failures": self.failures(),
                  "hosts": [asdict(self.results[n]) for n in self.order]}
        if self.traffic is not None:
            report["traffic_canary"] = self.traffic
        return report

    # -- the traffic canary -----------------------------------------------------------------------------

    def traffic_canary(self, batch: list[str]) -> str | None:
        """Weights, bake, gates (module docstring); why the rollout stops, None to go on."""
        from tritonfleet.fleet import gates

        o = self.opts
        assert self.lb is not None and o.canary_weight is not None and o.prometheus
        bake = o.bake or DEFAULT_BAKE
        self.traffic = rec = {"weight": o.canary_weight, "bake": bake, "hosts": list(batch), "set": None,
                              "verdict": None, "error": None}
        if any(self.results[n].status != "updated" for n in batch):
            rec["error"] = "a canary host failed: no traffic was sent to it"
            return "canary hosts failed: no traffic canary, no further batches"
        canary = [(n, self.hosts[n]) for n in batch]
        try:
            rec["set"] = self.lb.set_weights(canary, o.canary_weight)
        except Exception as exc:
            rec["error"] = f"weights: {_one_line(exc)}"
            self._restore(rec, rejoin=True)
            return f"traffic canary: weights not set: {_one_line(exc)}"
        logger.info(f"traffic canary: {rec['set']}; baking {bake:g}s")
        if logger.isEnabledFor(logging.DEBUG) and hasattr(self.lb, "view"):
            try:
                for v in self.lb.view():
                    logger.debug("balancer %s %s: %s (%s) %s, weight %s, sessions %s", v.balancer, v.pool, v.server,
                                 v.host or "?", v.state, v.weight, v.sessions)
            except Exception as exc:  # noqa: BLE001 - only for the log
                logger.debug("balancer view: %s", _one_line(exc))
        started = self.clock()
        while not self.stop_requested and self.clock() - started < bake:
            self.sleep(min(5.0, bake - (self.clock() - started)))
        if self.stop_requested:
            rec["error"] = "interrupted during the bake"
            self._restore(rec, rejoin=True)
            return "interrupted"
        rest = [n for n in self.order if n not in batch]
        try:
            verdict = gates.evaluate(o.prometheus, list(batch), rest, bake, max_error_ratio=o.max_error_ratio,
                                     max_latency_ratio=o.max_latency_ratio)
            rec["verdict"] = verdict.to_dict()
            line = verdict.line()
        except gates.GateError as exc:
            verdict, line = None, f"gates not evaluated: {_one_line(exc)}"
            rec["error"] = line
        if verdict is not None and verdict.ok:
            logger.info(f"canary gates {line}")
            if not self._restore(rec, rejoin=True):
                return f"traffic canary: weights not restored: {rec['error']}"
            return None
        logger.info(f"canary gates failed: {line}; rolling the canary back")
        self._restore(rec, rejoin=False)
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            list(pool.map(lambda n: self._gate_rollback(n, line), batch))
        return f"canary gate: {line}: no further batches"

    def _restore(self, rec: dict, rejoin: bool) -> bool:
        assert self.lb is not None
        try:
            self.lb.restore_weights(rejoin=rejoin)
            return True
        except Exception as exc:
            rec["error"] = _join(rec["error"] or "", f"restore: {_one_line(exc)}")
            logger.info(f"traffic canary: weights not restored: {_one_line(exc)}")
            return False

    def _gate_rollback(self, name: str, why: str) -> None:
        r, data = self.results[name], self.hosts[name]
        started = time.monotonic()
        try:
            self._rollback(r, data, "canary gate", why)
            if r.status != "rollback failed":
                self._put_back(r, data)
        except Exception as exc:
            r.status = "rollback failed" if r.status in NOT_FAILED else r.status
            r.message = _join(r.message, f"{type(exc).__name__}: {exc}")
        r.seconds = round(r.seconds + time.monotonic() - started, 1)
        logger.info(f"{name}: {r.status} ({r.failed_step})")


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
    traffic = report.get("traffic_canary")
    if traffic:
        verdict = traffic.get("verdict") or {}
        words = verdict.get("line") or traffic.get("error") or "not evaluated"
        style = "green" if verdict.get("ok") and not traffic.get("error") else "red"
        console.print(f"[{style}]traffic canary ({traffic['weight']}% for {traffic['bake']:g}s): {words}[/{style}]",
                      markup=True, highlight=False)
    if report["stopped"]:
        console.print(f"[red]stopped: {report['stopped']}[/red]")


def main(opts: Options) -> int:
    """Run a rollout; 0 when every host was updated. Progress goes to this module's logger (INFO)."""
    from tritonfleet.access.inventory import load_inventory_groups

    validate(opts)
    hosts, members = load_inventory_groups(opts.inventory)
    balancers: list[tuple[str, dict]] = []
    if opts.lb_kind == "haproxy":  # the lb group's hosts run HAProxy: they are not rolled out
        from tritonfleet.fleet.haproxy import group_hosts

        balancers = group_hosts(members, hosts)
        hosts = [(n, d) for n, d in hosts if n not in dict(balancers)]
    if opts.limit:
        unknown = sorted(set(opts.limit) - {n for n, _ in hosts})
        if unknown:
            raise RolloutError(f"--limit: not in {opts.inventory}: {', '.join(unknown)}")
        hosts = [(n, d) for n, d in hosts if n in opts.limit]
    if not hosts:
        raise RolloutError(f"{opts.inventory}: no hosts")
    if opts.canary_weight is not None and len(hosts) <= opts.canary:
        raise RolloutError(f"--canary-weight: {len(hosts)} host(s), all of them canaries: a traffic canary needs other "
                           "hosts to compare with")
    lb = load_balancer(opts, hosts, balancers)
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


def validate(opts: Options) -> None:
    """Every option a load balancer and a traffic canary need, checked before anything changes (one line)."""
    kind = opts.lb_kind
    if kind is not None and kind not in LB_KINDS:
        raise RolloutError(f"--lb {kind}: expected one of {', '.join(LB_KINDS)}")
    if kind == "elbv2" and not opts.target_group:
        raise RolloutError("--lb elbv2 needs --target-group (the target group the hosts serve in)")
    if kind == "haproxy" and opts.target_group:
        raise RolloutError("--target-group is for --lb elbv2 (--lb is haproxy)")
    w = opts.canary_weight
    if w is not None and not 0 <= w <= 100:
        raise RolloutError(f"--canary-weight {w}: expected a percentage 0-100")
    if opts.bake is not None and opts.bake <= 0:
        raise RolloutError(f"--bake {opts.bake:g}: expected seconds above 0")
    if (w is not None or opts.bake is not None) and not opts.prometheus:
        what = "--canary-weight" if w is not None else "--bake"
        raise RolloutError(f"{what} needs --prometheus: a traffic canary is judged by comparing its hosts' metrics "
                           "with the others' (without one, roll out in batches without weights)")
    if opts.bake is not None and w is None:
        raise RolloutError("--bake needs --canary-weight (the share of the traffic the canary gets while it bakes)")
    if not 0 <= opts.max_error_ratio <= 1:
        raise RolloutError(f"--max-error-ratio {opts.max_error_ratio:g}: expected a ratio 0-1 (0.01: 1% of requests)")
    if opts.max_latency_ratio <= 0:
        raise RolloutError(f"--max-latency-ratio {opts.max_latency_ratio:g}: expected a factor above 0")
    if w is None:
        return
    if kind is None:
        raise RolloutError("--canary-weight needs a load balancer (--lb haproxy, or --lb elbv2 with --target-group)")
    if opts.canary < 1:
        raise RolloutError("--canary-weight needs canary hosts (--canary 1 or more)")
    if kind == "elbv2":
        if not opts.canary_target_group:
            raise RolloutError("--canary-weight with --lb elbv2 needs --canary-target-group (the canary hosts' "
                               "target group)")
        if bool(opts.listener_arn) == bool(opts.rule_arn):
            raise RolloutError("--canary-weight with --lb elbv2 needs one of --listener-arn or --rule-arn (whose "
                               "forward action gets the weights)")


def load_balancer(opts: Options, hosts: list[tuple[str, dict]], balancers: list[tuple[str, dict]]):
    """The :class:`tritonfleet.fleet.lb.LoadBalancer` of the options, checked against the hosts; None without one."""
    from tritonfleet.fleet.lb import LoadBalancerError, TargetGroup

    lb: Any = None
    try:
        if opts.lb_kind == "elbv2":
            assert opts.target_group
            canary = ({"listener_arn": opts.listener_arn, "rule_arn": opts.rule_arn,
                       "canary_arn": opts.canary_target_group} if opts.canary_target_group else {})
            lb = TargetGroup(opts.target_group, opts.region, delay=opts.lb_delay,
                             attempts=max(1, round(opts.lb_timeout / opts.lb_delay)), **canary)
        elif opts.lb_kind == "haproxy":
            from tritonfleet.fleet.haproxy import HAProxy

            lb = HAProxy(balancers, timeout=opts.lb_timeout, interval=opts.lb_delay)
        if lb is not None:
            lb.check(hosts)
    except LoadBalancerError as exc:
        raise RolloutError(str(exc)) from None
    return lb


def _interrupt(rollout: Rollout) -> None:
    rollout.stop_requested = True
    logger.info("interrupted: the hosts in flight finish their steps; no new batch starts")
