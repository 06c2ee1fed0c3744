"""Canary rollout of a release to pull-mode hosts (issue 27): ``tritonfleet models rollout RELEASE``.

In pull mode every host's resident agent (``tritonfleet-agent pull``) serves the release its pointer names
(:mod:`tritonfleet.fleet.release`); a rollout moves pointers, never a host. The canary is a host group: the
hosts whose ``models_pull_group`` is ``--group`` follow ``RELEASE.<group>``. In order:

1. the hosts: every host of the inventory but the load balancers (the ``lb`` group, hosts without an
   accelerator) must have ``models_pull: true``; the canary hosts are those of the group (none: refused); the
   release root is ``--root`` or the hosts' ``models_s3_uri``, which must then be one and the same;
2. before anything changes: the release is checked (a Triton model repository below the root), the pointers
   are read (the report's ``pointers_before``), the canary group must have a release to go back to (its pointer,
   or the fleet's it follows) and every canary host a pull state (its agent runs);
3. canary: ``RELEASE.<group>`` names the release; the canary hosts must serve it (their state says ``release``
   and ``pointed`` are the release, ``failures`` 0) within ``--wait`` seconds. A canary host whose agent tried the
   release and failed (``pointed`` the release, ``failures`` 1 or more, newer than what it said before the
   write) fails the gate at once with its ``last_error``; the wait's end fails it naming the hosts still behind;
4. the rollout's gates: QA (``deploys/qa.py`` on each canary host with ``qa_suites``, through the rollout's
   :class:`tritonfleet.fleet.runner.Runner`; ``--no-qa`` skips it), then with ``--prometheus`` the metric gate
   (:func:`tritonfleet.fleet.gates.evaluate`, canary vs the other hosts) after ``--bake`` seconds;
5. every gate passed: the fleet's release (``RELEASE``, then every existing ``RELEASE.<group>``); every host
   must serve the release within ``--wait`` seconds: one that does not is ``not serving`` (a failure, with its
   ``last_error`` or what it serves), never ``updated``;
6. a gate failed: the canary's pointer gets its previous body back (:func:`tritonfleet.fleet.release.rollback`:
   deleted when it had none, the group follows ``RELEASE`` again) and the canary hosts must serve the release
   they served before within ``--wait`` seconds: ``rolled back`` or ``rollback failed``. The other hosts'
   pointers were never touched: ``not started``.

A host's status: ``updated``, ``not serving``, ``rolled back``, ``rollback failed``, ``not started``; the exit
code is 0 only when every host is ``updated``. The report (per host status, the gates' verdicts, seconds per
phase) is written to ``<reports>/release-rollout-<UTC stamp>.json`` and a summary printed; progress lines go to
this module's logger at INFO. One rollout at a time per reports directory (the rollout's lock,
:class:`tritonfleet.fleet.runner.ReportsLock`).

Ctrl-C (SIGINT) during the canary phase (the write, the wait, the gates) is a failed gate: the pointer is rolled
back and the canary hosts are waited for (a second Ctrl-C ends that wait); during the fleet phase it ends the
wait (the release is out). Every refusal and failure is one line (:class:`ReleaseRolloutError`,
:class:`tritonfleet.fleet.release.ReleaseError`).

Everything outside is injected (:class:`ReleaseRollout`, :func:`main`): the S3 client, the reader of the hosts'
pull states (default :func:`tritonfleet.access.health.served_releases`), the QA runner, the gates' evaluate and
the clock and sleep.

The options, the plan and what a host's pull state says (pure) are in :mod:`tritonfleet.fleet.releaseplan`, the
report's rows, file and summary in :mod:`tritonfleet.fleet.releasereport`; this module keeps the rollout itself
(:class:`ReleaseRollout`, :func:`main`) and re-exports their names.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tritonfleet.fleet import release as rel

# the options, the plan and a host's pull state (.releaseplan), the report's rows, file and summary
# (.releasereport): used here, and re-exported because the CLI and the tests reach them as releaseroll.<name>
from tritonfleet.fleet.releaseplan import (  # noqa: F401
    DEFAULT_BAKE,
    DEFAULT_WAIT,
    POLL,
    Options,
    Plan,
    ReleaseRolloutError,
    Waited,
    _names,
    _one_line,
    describe,
    load_hosts,
    plan,
    refused,
    serves,
    validate,
)
from tritonfleet.fleet.releasereport import STATUSES, HostResult, print_summary, write_report  # noqa: F401

#: Progress lines (the pointers written, a host serving, a gate's verdict, a rollback) at INFO.
logger = logging.getLogger(__name__)

#: The deploy of the QA gate (the rollout's).
QA_DEPLOY = "deploys/qa.py"

#: ``() -> {host: pull state | None}``
StateReader = Callable[[], "dict[str, dict | None]"]
#: ``host -> (passed, why)``
QARunner = Callable[[str], "tuple[bool, str]"]


# -- the rollout -------------------------------------------------------------------------------------------------

class ReleaseRollout:
    """One release rollout (the module docstring); :meth:`run` returns the report."""

    def __init__(self, opts: Options, plan: Plan, *, s3: Any, read_states: StateReader,
                 run_qa: QARunner | None = None, evaluate: Callable[..., Any] | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.opts, self.plan = opts, plan
        self.s3, self.read_states, self.run_qa, self.evaluate = s3, read_states, run_qa, evaluate
        self.clock, self.sleep = clock, sleep
        self.interrupted = 0  # Ctrl-C seen (interrupt())
        self.results = {h: HostResult(h, "canary" if h in plan.canary else "rest") for h in plan.hosts}
        self.gates: dict[str, Any] = {"serve": None, "qa": None, "metrics": None}
        self.phases: dict[str, float] = {}
        self.pointers_before: dict[str, str] = {}
        self.previous: str | None = None  # the release the canary group followed
        self.group_write: dict[str, Any] | None = None  # rel.release()'s result for the group's pointer
        self.group_before: dict[str, str | None] = {}  # the group pointer's body before (None: there was none)
        self.fleet: dict[str, Any] | None = None
        self.rollback: dict[str, Any] | None = None
        self.stopped: str | None = None

    def interrupt(self) -> None:
        """Ctrl-C: the canary phase fails (its pointer is rolled back); during a wait after that, a second one
        ends the wait."""
        self.interrupted += 1
        logger.info("interrupted: " + ("the canary's pointer goes back, the fleet's is not written (Ctrl-C again "
                                       "stops waiting for the hosts)" if self.interrupted == 1 else
                                       "no more waiting for the hosts"))

    # -- reading the hosts ----------------------------------------------------------------------------------------

    def _read(self) -> tuple[dict[str, dict | None], str | None]:
        try:
            states = self.read_states()
        except Exception as exc:  # one poll that failed: the next may not
            logger.debug("pull states not read: %s", _one_line(exc))
            return {}, _one_line(exc)
        return dict(states or {}), None

    def wait(self, hosts: list[str], release: str, *, fail_fast: bool = False,
             before: dict[str, dict | None] | None = None, patience: int = 1) -> Waited:
        """Read the hosts' pull states every ``poll`` seconds until every host of ``hosts`` serves ``release``,
        ``--wait`` seconds pass, ``patience`` Ctrl-Cs came, or (``fail_fast``) a host refused it."""
        started = self.clock()
        deadline = started + self.opts.wait
        w = Waited()
        while True:
            states, w.read_error = self._read()
            now = self.clock()
            for h in hosts:
                if h in w.served:
                    continue
                if h in states or h not in w.last:
                    w.last[h] = states.get(h)
                state = w.last[h]
                if serves(state, release):
                    w.served[h] = round(now - started, 1)
                    logger.info(f"{h}: serves {release} ({w.served[h]:g}s)")
                elif fail_fast and refused(state, release, (before or {}).get(h)):
                    w.refused[h] = describe(state)
            if not w.behind(hosts) or (fail_fast and w.refused):
                return w
            if self.interrupted >= patience:
                w.interrupted = True
                return w
            if now >= deadline:
                w.timed_out = True
                return w
            self._sleep(max(0.0, min(self.opts.poll, deadline - now)))

    def _sleep(self, seconds: float) -> None:
        """``sleep``; a KeyboardInterrupt in it (no handler of main(): not the main thread) is a Ctrl-C."""
        try:
            self.sleep(seconds)
        except KeyboardInterrupt:
            self.interrupted += 1

    def _timeout_line(self, w: Waited, hosts: list[str], release: str) -> str:
        behind = w.behind(hosts)
        said = "; ".join(f"{h}: {describe(w.last.get(h))}" for h in behind[:8])
        more = f"; and {len(behind) - 8} more" if len(behind) > 8 else ""
        read = f" (the last read of the states failed: {w.read_error})" if w.read_error else ""
        return f"not serving {release} after {self.opts.wait:g}s: {said}{more}{read}"

    # -- phases -----------------------------------------------------------------------------------------------------

    def _phase(self, name: str, started: float) -> None:
        self.phases[name] = round(self.phases.get(name, 0.0) + self.clock() - started, 1)

    def prepare(self) -> dict[str, dict | None]:
        """What is checked before anything changes; the hosts' pull states before (for :func:`refused`)."""
        p = self.plan
        started = self.clock()
        rel.check_release(self.s3, p.root, p.release)
        found = {x.name: x for x in rel.read_pointers(self.s3, p.root)}
        self.pointers_before = {n: x.release or f"invalid: {x.error}" for n, x in found.items()}
        mine = rel.pointer_name(p.group)
        follows = found.get(mine) or found.get(rel.POINTER)
        if follows is None:
            raise ReleaseRolloutError(
                f"{p.root}: neither {mine} nor {rel.POINTER} exists: the canary would have no release to go back "
                f"to: release the fleet first (tritonfleet models release RELEASE --root {p.root})")
        if follows.release is None:
            raise ReleaseRolloutError(f"{p.root}/{follows.name} names no release ({follows.error}), and the canary "
                                      f"group goes back to it on a failure: fix it first (tritonfleet models "
                                      "release)")
        self.previous = follows.release
        self.group_before = {mine: found[mine].body if mine in found else None}
        before, error = self._read()
        for h, r in self.results.items():
            r.before = r.serving = (before.get(h) or {}).get("release")
        blind = [h for h in p.canary if not isinstance(before.get(h), dict)]
        if blind:
            why = f" ({error})" if error else ""
            raise ReleaseRolloutError(f"{_names(blind)}: no pull state{why}: a canary host must run the pull agent "
                                      "(models_pull: true, deploys/models.py) and be reachable")
        unseen = [h for h in p.rest if not isinstance(before.get(h), dict)]
        if unseen:
            logger.warning("%s: no pull state yet (unreachable, or no pull agent): they may not serve %s",
                           _names(unseen), p.release)
        self._phase("prepare", started)
        return before

    def run(self) -> dict[str, Any]:
        p = self.plan
        before = self.prepare()
        if self.interrupted:
            raise ReleaseRolloutError("interrupted before anything changed")
        failed = self._canary(before)
        if failed is None and self.interrupted:  # a Ctrl-C just after the last gate: still the canary's
            failed = "interrupted"
        if failed is None:
            self._fleet()
        else:
            self.stopped = failed
            self._roll_back(failed)
            for h in p.rest:
                r = self.results[h]
                r.status, r.message = "not started", "the canary failed: the fleet's pointer was not written"
        return self.report()

    def _canary(self, before: dict[str, dict | None]) -> str | None:
        """The canary phase; None when every gate passed, else why it failed (one line). Whatever goes wrong once
        the group's pointer may have been written (an S3 error, a Ctrl-C) fails it: the caller rolls back."""
        p = self.plan
        started = self.clock()
        try:
            self.group_write = rel.release(self.s3, p.root, p.release, p.group, check=False)
            logger.info(f"canary: {rel.pointer_name(p.group)} -> {p.release} (was {self.previous}): "
                        f"{_names(p.canary)}")
            return self._gates(before, started)
        except KeyboardInterrupt:  # without the handler main() installs (not the main thread)
            self.interrupted = max(self.interrupted, 1)
            return "interrupted"
        except Exception as exc:
            logger.debug("canary", exc_info=True)
            return f"canary: {_one_line(exc)}"

    def _gates(self, before: dict[str, dict | None], started: float) -> str | None:
        p = self.plan
        w = self.wait(p.canary, p.release, fail_fast=True, before=before)
        for h in p.canary:
            r = self.results[h]
            r.serving = (w.last.get(h) or {}).get("release") or r.serving
            r.seconds = w.served.get(h)
        hosts = {h: ({"serving": True, "seconds": w.served[h]} if h in w.served else
                     {"serving": False, "why": w.refused.get(h) or describe(w.last.get(h))}) for h in p.canary}
        self._phase("canary", started)
        if w.refused:
            line = "; ".join(f"{h} refused {p.release}: {why}" for h, why in w.refused.items())
        elif w.interrupted:
            line = "interrupted"
        elif w.timed_out:
            line = self._timeout_line(w, p.canary, p.release)
        else:
            line = f"the {len(p.canary)} canary host(s) serve {p.release}"
        ok = not w.behind(p.canary)
        self.gates["serve"] = {"ok": ok, "line": line, "hosts": hosts}
        logger.info(f"canary gate: {line}")
        if not ok:
            return "interrupted" if line == "interrupted" else f"canary: {line}"
        for gate in (self._qa, self._metrics):
            if self.interrupted:
                return "interrupted"
            why = gate()
            if why is not None:
                return why
        return None  # a Ctrl-C in the last gate: run() sees it

    def _qa(self) -> str | None:
        p = self.plan
        if not self.opts.qa:
            self.gates["qa"] = {"ok": True, "skipped": "--no-qa"}
            return None
        hosts = [h for h in p.canary if p.data.get(h, {}).get("qa_suites")]
        if not hosts:
            self.gates["qa"] = {"ok": True, "skipped": "no canary host has qa_suites"}
            return None
        assert self.run_qa is not None, "a QA runner is needed for hosts with qa_suites"
        runner = self.run_qa
        started = self.clock()
        logger.info(f"QA gate: {QA_DEPLOY} on {_names(hosts)}")

        def one(h: str) -> tuple[bool, str]:
            try:
                return runner(h)
            except Exception as exc:  # a run that cannot even start is a failed gate
                return False, _one_line(exc)

        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            outcomes = dict(zip(hosts, pool.map(one, hosts), strict=True))
        self._phase("qa", started)
        bad = {h: why for h, (ok, why) in outcomes.items() if not ok}
        line = ("; ".join(f"{h}: QA failed: {why or 'failed'}" for h, why in bad.items()) if bad else
                f"passed on {_names(hosts)}")
        self.gates["qa"] = {"ok": not bad, "line": line,
                            "hosts": {h: {"ok": ok, "why": why} for h, (ok, why) in outcomes.items()}}
        logger.info(f"QA gate: {line}")
        return f"QA gate: {line}" if bad else None

    def _metrics(self) -> str | None:
        p, o = self.plan, self.opts
        if not o.prometheus:
            self.gates["metrics"] = {"ok": True, "skipped": "no --prometheus"}
            return None
        from tritonfleet.fleet import gates

        evaluate = self.evaluate or gates.evaluate
        bake = o.bake or DEFAULT_BAKE
        started = self.clock()
        logger.info(f"metric gate: baking {bake:g}s, then {o.prometheus} compares {_names(p.canary)} with the "
                    f"{len(p.rest)} other host(s)")
        while not self.interrupted and self.clock() - started < bake:
            self._sleep(min(o.poll, bake - (self.clock() - started)))
        self._phase("bake", started)
        if self.interrupted:
            self.gates["metrics"] = {"ok": False, "line": "interrupted during the bake"}
            return "interrupted"
        try:
            verdict = evaluate(o.prometheus, list(p.canary), list(p.rest), bake, max_error_ratio=o.max_error_ratio,
                               max_latency_ratio=o.max_latency_ratio)
        except gates.GateError as exc:
            line = f"gates not evaluated: {_one_line(exc)}"
            self.gates["metrics"] = {"ok": False, "line": line}
            logger.info(f"metric gate: {line}")
            return f"metric gate: {line}"
        self.gates["metrics"] = verdict.to_dict()
        line = verdict.line()
        logger.info(f"metric gate: {line}")
        if not verdict.ok:
            return f"metric gate: {line}"
        return None

    def _fleet(self) -> None:
        p = self.plan
        started = self.clock()
        try:
            written = rel.release(self.s3, p.root, p.release, None, check=False)
            self.fleet = {"written": written["written"], "was": written["was"], "error": None}
            logger.info(f"fleet: {', '.join(written['written'])} -> {p.release}")
        except rel.ReleaseError as exc:
            self.fleet = {"written": exc.written, "was": {}, "error": str(exc)}
            self.stopped = f"fleet release: {exc}"
            logger.info(f"fleet release failed: {exc}")
            if not exc.written:  # nothing written: the rest still follow the previous release
                for h in p.hosts:
                    r = self.results[h]
                    if h in p.canary:
                        r.status = "updated"
                    else:
                        r.status, r.message = "not started", f"the fleet's pointer was not written: {exc}"
                self._phase("fleet", started)
                return
        w = self.wait(p.hosts, p.release)
        self._phase("fleet", started)
        for h in p.hosts:
            r = self.results[h]
            r.serving = (w.last.get(h) or {}).get("release") or r.serving
            if h in w.served:
                r.status = "updated"
                if h in p.rest:
                    r.seconds = w.served[h]
            else:
                r.status = "not serving"
                why = "interrupted before it was seen serving: " if w.interrupted else \
                    f"not serving {p.release} after {self.opts.wait:g}s: "
                r.message = why + describe(w.last.get(h))
        if w.interrupted and self.stopped is None:
            self.stopped = "interrupted while the fleet's hosts were awaited"

    def _roll_back(self, why: str) -> None:
        p = self.plan
        started = self.clock()
        logger.info(f"rolling the canary back: {rel.pointer_name(p.group)} -> {self.previous} ({why})")
        try:
            done = rel.rollback(self.s3, p.root, self.group_write or {"previous": self.group_before})
            self.rollback = {"pointers": done, "error": None, "release": self.previous}
        except rel.ReleaseError as exc:
            self.rollback = {"pointers": {}, "error": str(exc), "release": self.previous}
            for h in p.canary:
                r = self.results[h]
                r.status, r.message = "rollback failed", f"{why} | rollback: {exc}"
            self._phase("rollback", started)
            return
        assert self.previous is not None
        w = self.wait(p.canary, self.previous, patience=2)
        self._phase("rollback", started)
        for h in p.canary:
            r = self.results[h]
            r.serving = (w.last.get(h) or {}).get("release") or r.serving
            if h in w.served:
                r.status, r.message = "rolled back", why
            else:
                r.status = "rollback failed"
                r.message = (f"{why} | rollback: not serving {self.previous} again"
                             f"{' (interrupted)' if w.interrupted else f' after {self.opts.wait:g}s'}: "
                             f"{describe(w.last.get(h))}")

    # -- the report -------------------------------------------------------------------------------------------------

    def failures(self) -> int:
        return sum(1 for r in self.results.values() if r.status not in ("updated", "not started"))

    def report(self) -> dict[str, Any]:
        p = self.plan
        for r in self.results.values():
            r.status = "not started" if r.status == "pending" else r.status
        return {"kind": "release rollout", "inventory": self.opts.inventory, "root": p.root, "release": p.release,
                "group": p.group, "pointer": rel.pointer_name(p.group), "previous": self.previous,
                "pointers_before": self.pointers_before, "canary": list(p.canary), "rest": list(p.rest),
                "wait": self.opts.wait, "gates": self.gates, "fleet": self.fleet, "rollback": self.rollback,
                "phases": self.phases, "stopped": self.stopped, "failures": self.failures(),
                "ok": all(r.status == "updated" for r in self.results.values()) and self.stopped is None,
                "hosts": [asdict(self.results[h]) for h in p.hosts]}


# -- main --------------------------------------------------------------------------------------------------------

def _default_qa(opts: Options) -> QARunner:
    """``deploys/qa.py`` on one host through the rollout's Runner (its own session, ``--step-timeout``)."""
    from tritonfleet.fleet import rollout as ro
    from tritonfleet.fleet.runner import Runner

    runner = Runner(ro.Options(inventory=opts.inventory, reports_dir=opts.reports_dir, root=opts.project,
                               step_timeout=opts.step_timeout))
    try:
        left = runner.wait_for_leftovers()
    except ro.RolloutError as exc:
        raise ReleaseRolloutError(str(exc)) from None
    if left:
        logger.info(f"waited for the runs an earlier rollout left on {', '.join(left)}")
    return lambda host: runner.run(QA_DEPLOY, host)


def main(opts: Options, *, hosts: list[tuple[str, dict]] | None = None, s3: Any = None,
         read_states: StateReader | None = None, run_qa: QARunner | None = None,
         evaluate: Callable[..., Any] | None = None, clock: Callable[[], float] | None = None,
         sleep: Callable[[float], None] | None = None, summary: bool = True) -> int:
    """Run a release rollout, write its report and print the summary; 0 when every host serves the release.
    Each keyword replaces what would be used otherwise (the inventory's hosts, an S3 client, the hosts' pull
    states read over SSH, the QA runs, the gates' Prometheus, the clock)."""
    from tritonfleet.fleet.rollout import RolloutError
    from tritonfleet.fleet.runner import ReportsLock

    validate(opts)
    p = plan(opts, hosts if hosts is not None else load_hosts(opts.inventory))
    qa_hosts = [h for h in p.canary if p.data[h].get("qa_suites")] if opts.qa else []
    if qa_hosts and run_qa is None and not (Path(opts.project) / QA_DEPLOY).is_file():
        raise ReleaseRolloutError(f"{QA_DEPLOY}: no such file below {opts.project} (run from the project checkout, "
                                  "or pass --no-qa)")
    if read_states is None:
        from tritonfleet.access.health import served_releases

        inventory = opts.inventory
        read_states = lambda: served_releases(inventory)  # noqa: E731
    try:
        with ReportsLock(opts.reports_dir):
            if qa_hosts and run_qa is None:
                run_qa = _default_qa(opts)
            roll = ReleaseRollout(opts, p, s3=s3 if s3 is not None else rel.client(opts.region, opts.endpoint_url),
                                  read_states=read_states, run_qa=run_qa, evaluate=evaluate,
                                  clock=clock or time.monotonic, sleep=sleep or time.sleep)
            try:
                previous = signal.signal(signal.SIGINT, lambda *_: roll.interrupt())
            except ValueError:  # not the main thread: Ctrl-C stays a KeyboardInterrupt
                previous = None
            try:
                report = roll.run()
            finally:
                if previous is not None:
                    signal.signal(signal.SIGINT, previous)
            path = write_report(report, opts.reports_dir)
    except RolloutError as exc:  # the reports lock
        raise ReleaseRolloutError(str(exc)) from None
    if summary:
        print_summary(report)
    logger.info(f"report: {path}")
    return 0 if report["ok"] else 1
