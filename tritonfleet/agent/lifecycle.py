"""Drain and warm start on an Auto Scaling group: the host's side of the group's lifecycle hooks
(:mod:`tritonfleet.fleet.asg` puts them on the group; the agent cannot import it, so the names are repeated here).

A new instance waits in ``Pending:Wait`` (out of the group's target groups and capacity) until its bootstrap
completes the launch hook, and a terminating one waits in ``Terminating:Wait`` until it is drained. Three commands,
``python -m tritonfleet.agent.lifecycle COMMAND`` (this module's own :func:`main`, run by the user data of
``templates/fleet/asg-user-data.sh.j2`` from the bundle's venv):

- ``launch-done --result CONTINUE|ABANDON --reason TEXT`` (:func:`launch_done`): the end of the user data.
  CONTINUE when the deploy and the QA gate passed; ABANDON otherwise, and then the reason goes to the log and to
  the instance's tag ``tritonfleet:abandon-reason`` first (the group terminates the instance; the tag stays readable
  on the terminated instance for about an hour, its scaling activity says "abandoned" for longer).
- ``heartbeat --every S --max N [--limit T] -- COMMAND...`` (:func:`heartbeat`): runs the command (the long
  deploy) and records a heartbeat of the launch hook every S seconds while it runs, N at most, so the hook's
  timeout (:data:`tritonfleet.fleet.asg.LAUNCH_TIMEOUT`) only has to cover the gap between two. The command's
  exit status is the wrapper's; with ``--limit`` the command is stopped after T seconds (exit status 124), so a
  hung deploy is abandoned with its reason rather than by the hook's timeout.
- ``watch-termination`` (:func:`watch_termination`, the ``tritonfleet-lifecycle`` systemd service): looks at the
  instance metadata's ``autoscaling/target-lifecycle-state`` every few seconds; on ``Terminated`` it runs the drain
  command (``--drain-command``, none by default), waits until the local Triton servers' requests in flight
  (``nv_inference_pending_request_count`` on their metrics ports) are 0 or ``--drain-wait`` passed, and completes
  the termination hook with CONTINUE.

Leaving the load balancer: a target group attached to the Auto Scaling group is left by the Auto Scaling service
itself (it deregisters a terminating instance and waits for the target group's deregistration delay), which needs
no permission on the host; the controller attaches the group's target groups (``tritonfleet fleet up --asg
--target-group``). An HAProxy front
(``roles/lb.py``) is on other hosts, driven by the controller over SSH: the drain command is the hook for it, e.g. a
script that asks a controller-side service to set this host's servers to ``drain`` (``{instance_id}`` in a word is
replaced by this instance's id).

Where the instance is: its id and region from IMDSv2 (:class:`.aws.Imds`: a token PUT, then GETs; each request
bounded; the endpoint from ``--imds`` or ``AWS_EC2_METADATA_SERVICE_ENDPOINT``, as boto3 reads it). Its group from
its tag ``aws:autoscaling:groupName`` through ``ec2:DescribeTags``, not from the instance metadata's
``tags/instance``: that needs ``InstanceMetadataTags`` enabled in the launch template, which puts every tag of the
instance in reach of whatever reaches the metadata service and makes EC2 refuse any tag key the metadata service
cannot carry (a ``/`` in a key added later, e.g. by an organization's tag policy, would fail that tagging) — for
one lookup per boot or termination.

The permissions (the fleet's instance profile): ``autoscaling:CompleteLifecycleAction`` and
``autoscaling:RecordLifecycleActionHeartbeat`` on the fleet's groups, ``ec2:DescribeTags`` (EC2 has no resource
scope for it) and ``ec2:CreateTags`` of the ``tritonfleet:abandon-reason`` key on the fleet's instances. AWS
clients retry as the fleet code's do (botocore's adaptive mode, 10 attempts, each request bounded in time).

Every wait is bounded in count and in time: the IMDS and metrics requests, the heartbeats (``--max``), the drain
command (``--drain-timeout``), the wait for requests in flight (``--drain-wait``), and the watcher's own loop
(``--max-polls``: then it exits with 75 and systemd starts a fresh one).

Standard library and boto3 only, Python 3.9 (the agent's rule).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import aws
from .aws import DEFAULT_IMDS, IMDS_ENV, Fetch, Imds, ImdsError, http_request  # lifecycle.Imds, as before
from .aws import why as _why
from .queuetime import SCRAPE_LIMIT, QueueTimeError, describe, parse_exposition

LAUNCH_HOOK = "tritonfleet-launch"  # tritonfleet/fleet/asg.py's LAUNCH_HOOK
TERMINATE_HOOK = "tritonfleet-terminate"  # and TERMINATE_HOOK
HOOKS = {"launch": LAUNCH_HOOK, "terminate": TERMINATE_HOOK}
GROUP_TAG = "aws:autoscaling:groupName"
REASON_TAG = "tritonfleet:abandon-reason"  # tritonfleet/fleet/asg.py's REASON_TAG
CONTINUE = "CONTINUE"
ABANDON = "ABANDON"
TARGET_STATE = "autoscaling/target-lifecycle-state"
TERMINATED = "Terminated"

ATTEMPTS = 10  # AWS requests: botocore's adaptive retry mode, as the fleet code's clients (tritonfleet/fleet/aws.py)
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 10.0

PENDING_GAUGE = "nv_inference_pending_request_count"
METRICS_TIMEOUT = 3.0  # seconds per scrape
#: without --metrics-url: the servers' default metrics ports (8002 + 10·i, tritonfleet/placement.py), on loopback
METRICS_BASE_PORT = 8002
METRICS_STRIDE = 10
MAX_SERVERS = 16

WATCH_EVERY = 5.0
WATCH_POLLS = 17280  # a day of looks at 5 s; then a fresh watcher
DRAIN_TIMEOUT = 60.0
DRAIN_WAIT = 300.0
DRAIN_EVERY = 2.0
STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL of a command past its limit
EXIT_LIMIT = 124  # a command stopped at its limit (as timeout(1) says it)
EXIT_AGAIN = 75  # the watcher ran its looks (EX_TEMPFAIL): systemd starts a fresh one
TAG_VALUE_LIMIT = 255
_NOT_TAG_CHARS = re.compile(r"[^A-Za-z0-9 ._:/+@-]+")  # what every tagging API takes, and the user data's tr


class LifecycleError(Exception):
    """Something the lifecycle commands could not do; ``str(e)`` is one line."""


def _say(line: str) -> None:
    print(f"tritonfleet lifecycle: {line}", flush=True)  # the bootstrap log, or the journal


def _line(exc: BaseException) -> str:
    """One line for any error: ours as it is, boto3's as ``Code: message``."""
    return str(exc) if isinstance(exc, LifecycleError) else describe(exc)


def tag_value(reason: str) -> str:
    """``reason`` as a tag value: the characters every tagging API takes, one line, 255 at most."""
    return " ".join(_NOT_TAG_CHARS.sub(" ", reason).split())[:TAG_VALUE_LIMIT] or "no reason given"


# -- HTTP: Triton's metrics (local, no proxy; the instance metadata is .aws.Imds) -----------------------------------

def _fetch(method: str, url: str, headers: dict[str, str], timeout: float) -> tuple[int, str]:
    return http_request(method, url, headers, timeout, SCRAPE_LIMIT)


# -- AWS ----------------------------------------------------------------------------------------------------------

def make_client(service: str, region: str, endpoint_url: str | None = None) -> Any:
    """A boto3 client (:func:`.aws.client`) from the default credential chain (the instance profile), each request
    bounded in time and retried as the fleet code's clients are (adaptive mode, :data:`ATTEMPTS`)."""
    return aws.client(service, region=region, endpoint_url=endpoint_url, connect_timeout=CONNECT_TIMEOUT,
                      read_timeout=READ_TIMEOUT, attempts=ATTEMPTS, mode="adaptive")


@dataclass(frozen=True)
class Instance:
    instance_id: str
    region: str
    group: str | None  # None: in no Auto Scaling group


class Host:
    """This instance and its AWS clients, found on first use (tests pass their own clients)."""

    def __init__(self, imds: Imds | None = None, *, region: str | None = None, endpoint_url: str | None = None,
                 autoscaling: Any = None, ec2: Any = None) -> None:
        self.imds = imds or Imds()
        self.region = region
        self.endpoint_url = endpoint_url
        self._clients: dict[str, Any] = {"autoscaling": autoscaling, "ec2": ec2}
        self._instance: Instance | None = None

    def client(self, service: str) -> Any:
        if self._clients.get(service) is None:
            region = self.region or self.instance().region
            self._clients[service] = make_client(service, region, self.endpoint_url)
        return self._clients[service]

    def instance(self) -> Instance:
        """The instance id and region (IMDS) and its group (its ``aws:autoscaling:groupName`` tag)."""
        if self._instance is None:
            try:
                instance_id, region = self.imds.identity()
            except ImdsError as exc:
                raise LifecycleError(str(exc)) from None
            self.region = self.region or region
            try:
                tags = self.client("ec2").describe_tags(Filters=[
                    {"Name": "resource-id", "Values": [instance_id]}, {"Name": "key", "Values": [GROUP_TAG]}])["Tags"]
            except Exception as exc:  # one line, whatever boto3 raised
                raise LifecycleError(f"cannot read the tag {GROUP_TAG} of {instance_id}: {describe(exc)}") from None
            group = str(tags[0]["Value"]) if tags else None
            self._instance = Instance(instance_id, self.region, group)
        return self._instance

    def in_group(self) -> Instance:
        where = self.instance()
        if where.group is None:
            raise LifecycleError(f"{where.instance_id} is in no Auto Scaling group (no tag {GROUP_TAG})")
        return where


def _hook_error(call: str, hook: str, where: Instance, exc: BaseException) -> LifecycleError:
    line = describe(exc)
    if "No active Lifecycle Action" in line:
        line += f" (the group has no {hook} hook, or its timeout ran out)"
    return LifecycleError(f"{call} {hook} for {where.instance_id} in {where.group}: {line}")


def complete(host: Host, hook: str, result: str) -> Instance:
    """``CompleteLifecycleAction`` of ``hook`` for this instance with ``result``; LifecycleError when it fails."""
    where = host.in_group()
    try:
        host.client("autoscaling").complete_lifecycle_action(
            LifecycleHookName=hook, AutoScalingGroupName=where.group, LifecycleActionResult=result,
            InstanceId=where.instance_id)
    except Exception as exc:  # one line, whatever boto3 raised
        raise _hook_error("CompleteLifecycleAction", hook, where, exc) from None
    return where


def record_heartbeat(host: Host, hook: str) -> None:
    """``RecordLifecycleActionHeartbeat`` of ``hook`` for this instance; LifecycleError when it fails."""
    where = host.in_group()
    try:
        host.client("autoscaling").record_lifecycle_action_heartbeat(
            LifecycleHookName=hook, AutoScalingGroupName=where.group, InstanceId=where.instance_id)
    except Exception as exc:  # one line, whatever boto3 raised
        raise _hook_error("RecordLifecycleActionHeartbeat", hook, where, exc) from None


# -- launch -------------------------------------------------------------------------------------------------------

def launch_done(ok: bool, reason: str, *, host: Host | None = None, say: Callable[[str], None] = _say) -> int:
    """Complete the launch hook: CONTINUE when ``ok``, else ABANDON, with ``reason`` on the instance's tag
    :data:`REASON_TAG` (set first: the group terminates the instance once the hook is completed) and in the log.

    0 when the hook is completed (or the instance is in no group: nothing to complete), 1 when it is not (the
    line says why; the hook's timeout then abandons the instance)."""
    host = host or Host()
    result = CONTINUE if ok else ABANDON
    reason = " ".join(str(reason).split())
    try:
        where = host.instance()
    except LifecycleError as exc:
        say(f"cannot complete the launch hook with {result} ({reason}): {exc}")
        return 1
    if where.group is None:
        say(f"{where.instance_id} is in no Auto Scaling group: no launch hook to complete ({result}: {reason})")
        return 0
    if not ok:
        say(f"ABANDON {where.instance_id} in {where.group}: {reason}")
        try:
            host.client("ec2").create_tags(Resources=[where.instance_id],
                                           Tags=[{"Key": REASON_TAG, "Value": tag_value(reason)}])
        except Exception as exc:  # the tag is a courtesy: the completion matters more
            say(f"cannot tag {where.instance_id} with {REASON_TAG}: {describe(exc)}")
    try:
        complete(host, LAUNCH_HOOK, result)
    except LifecycleError as exc:
        say(str(exc))
        return 1
    say(f"launch hook {LAUNCH_HOOK} of {where.group} completed for {where.instance_id}: {result}")
    return 0


# -- heartbeats around a long command -----------------------------------------------------------------------------

def _wait(proc: Any, timeout: float | None) -> int | None:
    try:
        return int(proc.wait(timeout=None if timeout is None else max(timeout, 0.0)))
    except subprocess.TimeoutExpired:
        return None


def _spawn(argv: list[str]) -> Any:
    """The command in a process group of its own, so that stopping it stops what it started (pyinfra's shells)."""
    return subprocess.Popen(argv, start_new_session=True)


def _signal(proc: Any, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (OSError, AttributeError, TypeError):  # not a group leader (a test's process), or gone
        proc.send_signal(signum)


def _stop(proc: Any, argv: Sequence[str], limit: float, say: Callable[[str], None]) -> int:
    say(f"{argv[0]} ran past its {limit:g} s limit: stopping it")
    _signal(proc, signal.SIGTERM)
    if _wait(proc, STOP_GRACE) is None:
        _signal(proc, signal.SIGKILL)
        _wait(proc, STOP_GRACE)
    return EXIT_LIMIT


def heartbeat(argv: Sequence[str], *, every: float, max_beats: int, beat: Callable[[], None] | None,
              limit: float | None = None, spawn: Callable[[list[str]], Any] = _spawn,
              clock: Callable[[], float] = time.monotonic, say: Callable[[str], None] = _say) -> int:
    """Run ``argv``; every ``every`` seconds while it runs, call ``beat`` (a heartbeat of the hook), at most
    ``max_beats`` times; the first beat that fails is the last one tried. With ``limit``, the command is stopped
    after that many seconds. Returns the command's exit status (:data:`EXIT_LIMIT` when it was stopped)."""
    if not argv:
        raise LifecycleError("heartbeat: no command to run (give it after --)")
    if not every > 0 or max_beats < 0 or (limit is not None and not limit > 0):
        raise LifecycleError(f"heartbeat: --every {every:g} and --limit must be > 0, --max {max_beats} >= 0")
    proc = spawn(list(argv))
    started = clock()
    sent = 0
    for _ in range(max_beats):
        left = None if limit is None else limit - (clock() - started)
        rc = _wait(proc, every if left is None else min(every, left))
        if rc is not None:
            return rc
        if limit is not None and clock() - started >= limit:
            return _stop(proc, argv, limit, say)
        if beat is not None:
            try:
                beat()
                sent += 1
            except Exception as exc:  # the command goes on; the hook's timeout bounds it now
                say(f"heartbeat {sent + 1} failed, no more heartbeats: {_line(exc)}")
                beat = None
    if beat is not None and max_beats:
        say(f"{sent} heartbeats sent, the most allowed: the hook's timeout bounds {argv[0]} from now on")
    rc = _wait(proc, None if limit is None else limit - (clock() - started))
    return rc if rc is not None else _stop(proc, argv, float(limit or 0), say)


# -- termination --------------------------------------------------------------------------------------------------

def discover_metrics(ports: Sequence[int] | None = None, address: str = "127.0.0.1",
                     timeout: float = METRICS_TIMEOUT, fetch: Fetch = _fetch) -> list[str]:
    """The metrics URLs of the Triton servers listening on ``ports`` (default: the servers' default metrics ports,
    8002 + 10·i for up to 16 servers): a port nothing listens on, or one whose answer is not Triton's metrics,
    is no server. Servers bound to another address, or on other ports, need ``--metrics-url``."""
    if ports is None:
        ports = [METRICS_BASE_PORT + METRICS_STRIDE * i for i in range(MAX_SERVERS)]
    found = []
    for port in ports:
        url = f"http://{address}:{port}/metrics"
        try:
            code, text = fetch("GET", url, {}, timeout)
        except OSError:
            continue
        if code == 200 and "nv_" in text:
            found.append(url)
    return found


def pending_requests(urls: Sequence[str], fetch: Fetch = _fetch,
                     timeout: float = METRICS_TIMEOUT) -> tuple[int, list[str]]:
    """``(requests in flight, problems)`` summed over the servers at ``urls`` (every model and version of
    ``nv_inference_pending_request_count``). A server that no longer listens has none; one that cannot be read is
    a problem (its requests are unknown)."""
    total, problems = 0, []
    for url in urls:
        try:
            code, text = fetch("GET", url, {}, timeout)
        except ConnectionRefusedError:
            continue  # stopped: nothing in flight there
        except OSError as exc:
            problems.append(f"{url}: {_why(exc)}")
            continue
        if code != 200:
            problems.append(f"{url}: HTTP {code}")
            continue
        try:
            samples = parse_exposition(text).samples
        except QueueTimeError as exc:
            problems.append(f"{url}: {exc}")
            continue
        total += int(sum(s.value for s in samples if s.name == PENDING_GAUGE))
    return total, problems


def wait_drained(urls: Sequence[str], *, wait: float, every: float, fetch: Fetch = _fetch,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 say: Callable[[str], None] = _say) -> bool:
    """Poll the servers at ``urls`` until no request is in flight (True) or ``wait`` seconds passed (False);
    ``wait / every + 2`` looks at most."""
    deadline = clock() + wait
    pending = 0
    problems: list[str] = []
    for _ in range(int(wait / every) + 2):
        pending, problems = pending_requests(urls, fetch)
        if pending == 0 and not problems:
            say(f"no request in flight on {len(urls)} Triton server(s)")
            return True
        left = deadline - clock()
        if left <= 0:
            break
        sleep(min(every, left))
    unread = f"; unread: {'; '.join(problems)}" if problems else ""
    say(f"{pending} request(s) still in flight after {wait:g} s{unread}: completing the hook anyway")
    return False


def _run(argv: Sequence[str], timeout: float) -> tuple[int, str]:
    """``(exit status, its last line of stderr)``: 124 when it ran past ``timeout`` (ended), 127 when not found."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return EXIT_LIMIT, f"ran past its {timeout:g} s limit"
    except OSError as exc:
        return 127, _why(exc)
    lines = [x for x in (done.stderr or "").splitlines() if x.strip()]
    return done.returncode, (" ".join(lines[-1].split()) if lines else "")


def drain_and_complete(host: Host, *, drain_command: Sequence[str] = (), drain_timeout: float = DRAIN_TIMEOUT,
                       drain_wait: float = DRAIN_WAIT, drain_every: float = DRAIN_EVERY,
                       metrics_urls: Sequence[str] | None = None,
                       run: Callable[[Sequence[str], float], tuple[int, str]] = _run, fetch: Fetch = _fetch,
                       sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                       say: Callable[[str], None] = _say) -> int:
    """The termination: the drain command, the wait for the requests in flight, then the termination hook
    completed with CONTINUE. 0 when completed, 1 when not (the hook's timeout then lets the termination go on)."""
    say("the Auto Scaling group terminates this instance: draining it first")
    try:
        instance_id: str | None = host.instance().instance_id
    except LifecycleError as exc:
        say(str(exc))
        instance_id = None
    if drain_command:
        if instance_id is None and any("{instance_id}" in w for w in drain_command):
            say("drain command not run: it needs the instance id")
        else:
            argv = [w.replace("{instance_id}", instance_id or "") for w in drain_command]
            rc, why = run(argv, drain_timeout)
            if rc == 0:
                say(f"drain command {shlex.join(argv)}: done")
            else:
                say(f"drain command {shlex.join(argv)} failed ({why or f'exit status {rc}'}): waiting for the "
                    "requests in flight all the same")
    urls = list(metrics_urls) if metrics_urls is not None else discover_metrics(fetch=fetch)
    wait_drained(urls, wait=drain_wait, every=drain_every, fetch=fetch, sleep=sleep, clock=clock, say=say)
    try:
        where = complete(host, TERMINATE_HOOK, CONTINUE)
    except LifecycleError as exc:
        say(str(exc))
        return 1
    say(f"termination hook {TERMINATE_HOOK} of {where.group} completed for {where.instance_id}: CONTINUE")
    return 0


def watch_termination(host: Host, *, every: float = WATCH_EVERY, max_polls: int = WATCH_POLLS,
                      sleep: Callable[[float], None] = time.sleep, say: Callable[[str], None] = _say,
                      **drain: Any) -> int:
    """Look at the target lifecycle state every ``every`` seconds, ``max_polls`` times at most; on ``Terminated``,
    :func:`drain_and_complete` (``drain``: its options) and its exit status. :data:`EXIT_AGAIN` after the last look."""
    said: str | None = None
    for _ in range(max_polls):
        try:
            state, problem = host.imds.get(TARGET_STATE), None
        except ImdsError as exc:
            state, problem = None, str(exc)
        if problem != said:  # a problem is said once, not every few seconds
            say(problem or "the instance metadata answers again")
            said = problem
        if state == TERMINATED:
            return drain_and_complete(host, sleep=sleep, say=say, **drain)
        sleep(every)
    say(f"{max_polls} looks at {TARGET_STATE} and no termination: exiting for a fresh watcher")
    return EXIT_AGAIN


# -- the command line ---------------------------------------------------------------------------------------------

def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: expected a number of seconds > 0")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: expected a count >= 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--region", help="AWS region (default: the instance's, from the instance metadata)")
    common.add_argument("--imds", help=f"instance metadata endpoint (default: ${IMDS_ENV} or {DEFAULT_IMDS})")
    common.add_argument("--endpoint-url", help="AWS endpoint for Auto Scaling and EC2 (default: AWS's)")
    parser = argparse.ArgumentParser(prog="python -m tritonfleet.agent.lifecycle",
                                     description="The host side of an Auto Scaling group's lifecycle hooks.")
    commands = parser.add_subparsers(dest="command", required=True)
    done = commands.add_parser("launch-done", parents=[common], help="complete the launch hook")
    done.add_argument("--result", choices=(CONTINUE, ABANDON), required=True)
    done.add_argument("--reason", default="", help="why (ABANDON: the instance's tag and the log)")
    beat = commands.add_parser("heartbeat", parents=[common], help="run a command, recording hook heartbeats")
    beat.add_argument("--hook", choices=sorted(HOOKS), default="launch")
    beat.add_argument("--every", type=_positive, default=60.0, help="seconds between two heartbeats (60)")
    beat.add_argument("--max", type=_count, default=30, help="heartbeats at most (30)")
    beat.add_argument("--limit", type=_positive, help="seconds the command may run, then it is stopped (exit 124)")
    beat.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    watch = commands.add_parser("watch-termination", parents=[common], help="drain before the group terminates")
    watch.add_argument("--every", type=_positive, default=WATCH_EVERY, help="seconds between two looks (5)")
    watch.add_argument("--max-polls", type=_count, default=WATCH_POLLS, help="looks, then exit 75 (a day's)")
    watch.add_argument("--drain-command", default="", help="command run first ({instance_id} is replaced)")
    watch.add_argument("--drain-timeout", type=_positive, default=DRAIN_TIMEOUT, help="its seconds at most (60)")
    watch.add_argument("--drain-wait", type=_positive, default=DRAIN_WAIT,
                       help="seconds to wait for the requests in flight (300)")
    watch.add_argument("--drain-every", type=_positive, default=DRAIN_EVERY, help="seconds between two looks (2)")
    watch.add_argument("--metrics-url", action="append", help="a Triton server's metrics URL (repeat; default: "
                       f"the servers listening on 127.0.0.1:{METRICS_BASE_PORT} + {METRICS_STRIDE}·i)")
    return parser


def main(argv: Sequence[str] | None = None, host: Host | None = None) -> int:
    args = build_parser().parse_args(argv)
    host = host or Host(Imds(args.imds), region=args.region, endpoint_url=args.endpoint_url)
    if args.command == "launch-done":
        return launch_done(args.result == CONTINUE, args.reason, host=host)
    if args.command == "heartbeat":
        command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        hook = HOOKS[args.hook]
        try:
            return heartbeat(command, every=args.every, max_beats=args.max, limit=args.limit,
                             beat=lambda: record_heartbeat(host, hook))
        except LifecycleError as exc:
            _say(str(exc))
            return 2
        except OSError as exc:  # the command could not be started
            _say(f"cannot run {command[0]}: {_why(exc)}")
            return 127
    try:
        drain_command = shlex.split(args.drain_command)
    except ValueError as exc:
        _say(f"--drain-command {args.drain_command!r}: {exc}")
        return 2
    return watch_termination(host, every=args.every, max_polls=args.max_polls, drain_command=drain_command,
                             drain_timeout=args.drain_timeout, drain_wait=args.drain_wait,
                             drain_every=args.drain_every, metrics_urls=args.metrics_url)


if __name__ == "__main__":
    sys.exit(main())
