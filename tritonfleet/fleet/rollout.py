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

Traffic canary (``canary_weight``, with ``prometheus``): once the canary batch is updated and back, it
gets that share of the requests for ``bake`` seconds and the gates judge it (:mod:`tritonfleet.fleet.canary`).

A host's status: ``updated``; ``rolled back`` (a step failed, the recorded point serves again); ``rollback
failed`` (it does not serve again: it stays out of the load balancer); ``out of the load balancer`` (it serves,
but its targets never became healthy again); ``not changed`` (its point could not be recorded or it could not
leave the load balancer: nothing was applied); ``not started``. Every status but ``updated`` and ``not
started`` is a failure. New batches stop once the failed hosts exceed ``fail_percent`` of the fleet. A summary
table is printed and ``<reports>/rollout-<UTC stamp>.json`` written; progress lines go to this module's logger
(the traffic canary's to :mod:`tritonfleet.fleet.canary`'s) at INFO (the command line shows them on stderr).
The exit code is non-zero when a host failed or the rollout stopped early.

One rollout at a time per reports directory: ``<reports>/.rollout.lock`` (flock, with the holder's pid) is
held for the whole run, and a second rollout ends at once with one line naming the first.

Interruption: pyinfra runs in sessions of their own, so Ctrl-C (SIGINT) reaches only the rollout, which
starts nothing new, lets the hosts in flight finish their step sequence, and reports. If the rollout
itself is killed (SIGKILL), the pyinfra runs in flight still finish (each host ends on the old or the new
version, serving); their process ids are in ``<reports>/.rollout-running.json`` and the next rollout
waits for them before it starts. The pyinfra runs and the lock: :mod:`tritonfleet.fleet.runner`.
"""

from __future__ import annotations

import json
import logging
import shlex
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tritonfleet import hostcontract as hc
from tritonfleet.fleet.canary import load_balancer, options_from_data, traffic_canary, validate
from tritonfleet.fleet.runner import ReportsLock, Runner

#: Progress lines (a batch starts, a host's outcome, a rollback) at INFO; the CLI shows them on stderr.
logger = logging.getLogger(__name__)

DEFAULT_MODELS_DIR = "/opt/tritonfleet/models"
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
    lb_timeout: float = 600  # seconds a host may take to drain, and to be healthy again, in the load balancer
    lb_delay: float = 5  # seconds between two looks at the load balancer
    root: str = "."  # where deploys/ live (the project checkout)
    lb: str | None = None  # "elbv2", "haproxy"; None: elbv2 when target_group is given, else no load balancer
    listener_arn: str | None = None  # elbv2 traffic canary: the listener whose default action forwards ...
    rule_arn: str | None = None  # ... or the listener rule that does
    canary_target_group: str | None = None  # elbv2 traffic canary: the canary hosts' target group
    canary_weight: int | None = None  # percent of the requests to the canary hosts during the bake; None: no bake
    bake: float | None = None  # seconds of the traffic canary (canary.DEFAULT_BAKE when None)
    prometheus: str | None = None  # the Prometheus the gates ask (its URL)
    max_error_ratio: float = 0.01  # the canary's error ratio above which it fails (absolute)
    max_latency_ratio: float = 1.5  # the canary's latency per request above this times the others' fails it
    given: frozenset[str] = frozenset()  # the options the command line set: host data (rollout_*) gives the rest

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


#: seconds between two looks at a host that does not serve yet (one SSH command each)
SERVING_POLL = 1.0


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
        time.sleep(SERVING_POLL)


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
                stopped = traffic_canary(self, batch)
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
    from tritonfleet.fleet.haproxy import GROUP, group_hosts

    validate(opts)
    everyone, members = load_inventory_groups(opts.inventory)
    # the lb group's hosts run HAProxy and no Triton server: never rolled out, whichever balancer is used
    hosts = [(n, d) for n, d in everyone if n not in set(members.get(GROUP, []))]
    opts = options_from_data(opts, hosts)
    validate(opts)
    balancers = group_hosts(members, everyone) if opts.lb_kind == "haproxy" else []
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


def _interrupt(rollout: Rollout) -> None:
    rollout.stop_requested = True
    logger.info("interrupted: the hosts in flight finish their steps; no new batch starts")
