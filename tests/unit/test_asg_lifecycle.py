"""Drain and warm start on the Auto Scaling group (issue 25, part 2): the group's lifecycle hooks
(``tritonfleet/fleet/asg.py``) and the host's side of them (``tritonfleet/agent/lifecycle.py``): the launch hook
completed with CONTINUE or ABANDON (and the reason's tag), bounded heartbeats around a long command, and the
termination watcher that drains the local Triton servers before it completes the termination hook.

moto (5.2) keeps the hooks (``PutLifecycleHook``, ``DescribeLifecycleHooks``), the group, its instance and the
instance's tags, but implements neither ``CompleteLifecycleAction`` nor ``RecordLifecycleActionHeartbeat`` and
never holds an instance in ``Pending:Wait`` or ``Terminating:Wait``. :class:`PendingActions` stands in for those
two calls, at botocore's ``before-call`` (after botocore has checked the parameters against the API model): it
answers as AWS does, with ``ValidationError: No active Lifecycle Action found...`` unless the hook exists on the
group in moto, the instance is in that group in moto and the test opened that action. The instance metadata
and the Triton metrics port are small HTTP servers on loopback."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from botocore.awsrequest import AWSResponse

from tests.stubhttp import QuietHandler, serve
from tests.unit.test_fleet_support import (
    REGION,
    aws,  # noqa: F401 - fixture
    image_named,
)
from tritonfleet.agent import lifecycle
from tritonfleet.fleet import asg
from tritonfleet.fleet.tags import FleetError

ROOT = Path(__file__).resolve().parents[2]


# -- the hooks on the group ------------------------------------------------------------------------------------------

def _subnets(clients) -> list[str]:
    return sorted(s["SubnetId"] for s in clients.ec2.describe_subnets(
        Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"])[:2]


def _count_calls(client, operation: str) -> list[dict]:
    """The parameters of every ``operation`` call ``client`` sends from now on."""
    seen: list[dict] = []
    client.meta.events.register(f"provide-client-params.auto-scaling.{operation}",
                                lambda params, **_: seen.append(dict(params)))
    return seen


@pytest.fixture
def group(aws):  # noqa: F811
    """A moto group of one instance, made by ensure_group; ``(group name, instance id)``."""
    template = asg.ensure_launch_template(aws, "prod", {"ImageId": image_named(aws, "ubuntu"),
                                                         "InstanceType": "t3.micro"})
    name, created = asg.ensure_group(aws, "prod", template, _subnets(aws), desired=1)
    assert created
    [instance] = aws.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]["Instances"]
    return name, instance["InstanceId"]


def _hooks(clients, name: str) -> dict[str, dict]:
    return {h["LifecycleHookName"]: h for h in
            clients.asg.describe_lifecycle_hooks(AutoScalingGroupName=name)["LifecycleHooks"]}


def test_ensure_group_puts_both_hooks_and_only_what_differs_afterwards(aws):  # noqa: F811
    creates = _count_calls(aws.asg, "CreateAutoScalingGroup")
    puts = _count_calls(aws.asg, "PutLifecycleHook")
    template = asg.ensure_launch_template(aws, "prod", {"ImageId": image_named(aws, "ubuntu"),
                                                         "InstanceType": "t3.micro"})
    name, _ = asg.ensure_group(aws, "prod", template, _subnets(aws), desired=1)
    # the group is created with its hooks, so that its first instances wait too (moto ignores that list: the
    # hooks are then put once by ensure_lifecycle_hooks; on AWS that finds them and puts nothing)
    assert [h["LifecycleHookName"] for h in creates[0]["LifecycleHookSpecificationList"]] == [
        asg.LAUNCH_HOOK, asg.TERMINATE_HOOK]
    hooks = _hooks(aws, name)
    assert {k: (h["LifecycleTransition"], h["HeartbeatTimeout"], h["DefaultResult"]) for k, h in hooks.items()} == {
        "tritonfleet-launch": ("autoscaling:EC2_INSTANCE_LAUNCHING", asg.LAUNCH_TIMEOUT, "ABANDON"),
        "tritonfleet-terminate": ("autoscaling:EC2_INSTANCE_TERMINATING", asg.TERMINATE_TIMEOUT, "CONTINUE")}
    assert len(puts) == 2

    # again: nothing differs, nothing is put
    asg.ensure_group(aws, "prod", template, _subnets(aws), desired=2)
    assert asg.ensure_lifecycle_hooks(aws, name) == []
    assert len(puts) == 2
    # a new termination timeout: that hook alone
    assert asg.ensure_lifecycle_hooks(aws, name, terminate_timeout=900) == [asg.TERMINATE_HOOK]
    assert puts[-1] == {"AutoScalingGroupName": name, "LifecycleHookName": "tritonfleet-terminate",
                        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING", "HeartbeatTimeout": 900,
                        "DefaultResult": "CONTINUE"}
    assert _hooks(aws, name)["tritonfleet-terminate"]["HeartbeatTimeout"] == 900
    assert _hooks(aws, name)["tritonfleet-launch"]["HeartbeatTimeout"] == asg.LAUNCH_TIMEOUT


@pytest.mark.parametrize("kwargs, message", [
    ({"launch_timeout": 29}, "--launch-timeout 29: expected 30-7200 seconds"),
    ({"terminate_timeout": 7201}, "--terminate-timeout 7201: expected 30-7200 seconds"),
    ({"launch_timeout": True}, "--launch-timeout True: expected 30-7200"),
])
def test_hook_timeouts_are_bounded_in_one_line(aws, kwargs, message):  # noqa: F811
    with pytest.raises(FleetError, match=message) as exc:
        asg.ensure_group(aws, "prod", ("lt-1", 1), ["subnet-1"], desired=1, **kwargs)
    assert "\n" not in str(exc.value)
    with pytest.raises(FleetError, match=message):
        asg.ensure_lifecycle_hooks(aws, "tritonfleet-prod", **kwargs)


def test_the_drain_fits_the_termination_hook_and_its_command_is_checked():
    assert asg.DRAIN_TIMEOUT + asg.DRAIN_WAIT + asg.COMPLETE_MARGIN <= asg.TERMINATE_TIMEOUT
    assert asg.heartbeat_every() * 2 < asg.LAUNCH_TIMEOUT and asg.heartbeat_every(60) == 20
    unit = asg.lifecycle_unit(REGION, drain_command=["/usr/local/bin/lb-drain", "--instance", "{instance_id}"])
    assert ("ExecStart=/opt/tritonfleet/controller/bin/python -m tritonfleet.agent.lifecycle watch-termination "
            f"--region {REGION} --every 5 --drain-timeout 60 --drain-wait 300 "
            "--drain-command '/usr/local/bin/lb-drain --instance {instance_id}'\n") in unit
    with pytest.raises(FleetError, match="do not fit the termination hook's 600 s"):
        asg.lifecycle_unit(REGION, drain_wait=550)
    for word in ("$HOME", "50%", "it's", "a b", "x\ny"):
        with pytest.raises(FleetError, match="no spaces, quotes, \\$ or %"):
            asg.lifecycle_unit(REGION, drain_command=["drain", word])


# -- AWS's side of the lifecycle actions, which moto lacks ------------------------------------------------------------

class PendingActions:
    """``CompleteLifecycleAction`` and ``RecordLifecycleActionHeartbeat`` as AWS answers them, on the hooks, groups
    and instances moto holds; ``timeline`` is shared with the stub servers (what happened, in order)."""

    def __init__(self, clients, timeline: list) -> None:
        self.clients = clients
        self.timeline = timeline
        self.open: set[tuple[str, str, str]] = set()  # (group, hook, instance)
        self.completed: list[tuple[str, str, str, str]] = []  # (group, hook, instance, result)
        self.heartbeats: list[tuple[str, str, str]] = []

    def start(self, group: str, hook: str, instance: str) -> None:
        """The group put ``instance`` into the wait state of ``hook``."""
        self.open.add((group, hook, instance))

    def attach(self, client) -> None:
        for operation in ("CompleteLifecycleAction", "RecordLifecycleActionHeartbeat"):
            client.meta.events.register_first(f"before-call.auto-scaling.{operation}", self._answer)

    def _error(self, message: str):
        return AWSResponse("https://autoscaling.amazonaws.com/", 400, {}, None), {
            "Error": {"Code": "ValidationError", "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 400}}

    def _answer(self, model, params, **_):
        body = params["body"]
        group, hook, instance = body["AutoScalingGroupName"], body["LifecycleHookName"], body["InstanceId"]
        hooks = {h["LifecycleHookName"] for h in self.clients.asg.describe_lifecycle_hooks(
            AutoScalingGroupName=group)["LifecycleHooks"]}
        members = {i["InstanceId"] for g in self.clients.asg.describe_auto_scaling_groups(
            AutoScalingGroupNames=[group])["AutoScalingGroups"] for i in g["Instances"]}
        if hook not in hooks or instance not in members or (group, hook, instance) not in self.open:
            return self._error(f"No active Lifecycle Action found with instance ID {instance}")
        if model.name == "CompleteLifecycleAction":
            result = body["LifecycleActionResult"]
            if result not in ("CONTINUE", "ABANDON"):
                return self._error(f"Invalid LifecycleActionResult {result}")
            self.open.discard((group, hook, instance))
            self.completed.append((group, hook, instance, result))
            self.timeline.append(("complete", hook, result))
        else:
            self.heartbeats.append((group, hook, instance))
            self.timeline.append(("heartbeat", hook))
        return AWSResponse("https://autoscaling.amazonaws.com/", 200, {}, None), {
            "ResponseMetadata": {"HTTPStatusCode": 200}}


# -- the instance metadata and Triton's metrics port ----------------------------------------------------------------

class FakeImds:
    """IMDSv2 on loopback: a token (PUT, TTL header required), then instance-id, placement/region and
    autoscaling/target-lifecycle-state (the next of ``states`` each look, the last one stays)."""

    TOKEN = "imds-token-123"

    def __init__(self, instance_id: str, region: str = REGION, states: list[str] | None = None) -> None:
        self.items = {"instance-id": instance_id, "placement/region": region}
        self.states = list(states or ["InService"])
        self.looks = 0
        self.unauthorized = 0
        fake = self

        class Handler(QuietHandler):
            def do_PUT(self):
                if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    return self._reply(200, fake.TOKEN.encode())
                return self._reply(400, b"")

            def do_GET(self):
                if self.headers.get("X-aws-ec2-metadata-token") != fake.TOKEN:
                    fake.unauthorized += 1
                    return self._reply(401, b"")
                item = self.path.removeprefix("/latest/meta-data/")
                if item == lifecycle.TARGET_STATE:
                    fake.looks += 1
                    state = fake.states.pop(0) if len(fake.states) > 1 else fake.states[0]
                    return self._reply(200, state.encode())
                if item in fake.items:
                    return self._reply(200, fake.items[item].encode())
                return self._reply(404, b"")

        self.server, self.url = serve(Handler)


class FakeTriton:
    """A Triton metrics port whose ``nv_inference_pending_request_count`` (two models) is the next of ``pending``
    at each scrape (the last one stays); each scrape goes to ``timeline``."""

    def __init__(self, pending: list[int], timeline: list) -> None:
        self.pending = list(pending)
        fake = self

        class Handler(QuietHandler):
            def do_GET(self):
                value = fake.pending.pop(0) if len(fake.pending) > 1 else fake.pending[0]
                timeline.append(("scrape", value))
                first = value // 2
                text = ("# HELP nv_inference_pending_request_count Instantaneous number of pending requests\n"
                        "# TYPE nv_inference_pending_request_count gauge\n"
                        f'nv_inference_pending_request_count{{model="resnet50",version="1"}} {first}\n'
                        f'nv_inference_pending_request_count{{model="bert",version="3"}} {value - first}\n'
                        "nv_cpu_utilization 0.5\n")
                self._reply(200, text.encode())

        self.server, self.url = serve(Handler)
        self.metrics = self.url + "/metrics"


@pytest.fixture
def stubs():
    made: list = []
    yield made
    stopping = [threading.Thread(target=stub.server.shutdown) for stub in made]  # each waits up to 0.5 s: at once
    for thread in stopping:
        thread.start()
    for thread, stub in zip(stopping, made, strict=True):
        thread.join()
        stub.server.server_close()


@pytest.fixture
def host(aws, group, stubs):  # noqa: F811
    """The moto group's instance as the agent sees it: its IMDS, its own clients, the pending actions."""
    name, instance_id = group
    timeline: list = []
    actions = PendingActions(aws, timeline)
    imds = FakeImds(instance_id)
    stubs.append(imds)
    autoscaling = lifecycle.make_client("autoscaling", REGION)
    actions.attach(autoscaling)
    found = lifecycle.Host(lifecycle.Imds(imds.url), autoscaling=autoscaling)
    return found, actions, imds, timeline


def _tags(clients, instance_id: str) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in clients.ec2.describe_tags(
        Filters=[{"Name": "resource-id", "Values": [instance_id]}])["Tags"]}


# -- launch ---------------------------------------------------------------------------------------------------------

def test_launch_done_continues_a_pending_launch(aws, group, host):  # noqa: F811
    name, instance_id = group
    found, actions, imds, _ = host
    actions.start(name, asg.LAUNCH_HOOK, instance_id)
    lines: list[str] = []
    assert lifecycle.launch_done(True, "the deploy and the QA gate passed", host=found, say=lines.append) == 0
    assert actions.completed == [(name, "tritonfleet-launch", instance_id, "CONTINUE")]
    assert found.instance() == lifecycle.Instance(instance_id, REGION, name)  # the group from the instance's tag
    assert lifecycle.REASON_TAG not in _tags(aws, instance_id)
    assert lines == [f"launch hook tritonfleet-launch of {name} completed for {instance_id}: CONTINUE"]
    assert imds.unauthorized == 0
    # completed once: a second completion finds no action, in one line, and says what to check
    lines.clear()
    assert lifecycle.launch_done(True, "again", host=found, say=lines.append) == 1
    assert lines == [f"CompleteLifecycleAction tritonfleet-launch for {instance_id} in {name}: ValidationError: "
                     f"No active Lifecycle Action found with instance ID {instance_id} (the group has no "
                     "tritonfleet-launch hook, or its timeout ran out)"]


def test_launch_done_abandons_with_the_reason_on_the_tag_and_in_the_log(aws, group, host):  # noqa: F811
    name, instance_id = group
    found, actions, _, timeline = host
    actions.start(name, asg.LAUNCH_HOOK, instance_id)
    lines: list[str] = []
    reason = 'bundle sha256 mismatch, not running it\n(expected "ab…")'
    assert lifecycle.launch_done(False, reason, host=found, say=lines.append) == 0
    assert actions.completed == [(name, "tritonfleet-launch", instance_id, "ABANDON")]
    assert _tags(aws, instance_id)["tritonfleet:abandon-reason"] == "bundle sha256 mismatch not running it expected ab"
    assert lines[0] == f"ABANDON {instance_id} in {name}: bundle sha256 mismatch, not running it (expected \"ab…\")"
    assert lines[-1].endswith(": ABANDON")


def test_launch_done_outside_a_group_or_without_metadata_says_so(aws, stubs):  # noqa: F811
    instance_id = aws.ec2.run_instances(ImageId=image_named(aws, "ubuntu"), MinCount=1, MaxCount=1)[
        "Instances"][0]["InstanceId"]
    imds = FakeImds(instance_id)
    stubs.append(imds)
    lines: list[str] = []
    assert lifecycle.launch_done(True, "ok", host=lifecycle.Host(lifecycle.Imds(imds.url)), say=lines.append) == 0
    assert lines == [f"{instance_id} is in no Auto Scaling group: no launch hook to complete (CONTINUE: ok)"]
    lines.clear()
    closed = lifecycle.Imds("http://127.0.0.1:9", timeout=1)  # the discard port: nothing listens
    assert lifecycle.launch_done(False, "boom", host=lifecycle.Host(closed), say=lines.append) == 1
    assert lines[0].startswith("cannot complete the launch hook with ABANDON (boom): instance metadata at "
                               "http://127.0.0.1:9: ")


def test_the_command_line_completes_the_hook(group, host):
    name, instance_id = group
    found, actions, _, _ = host
    actions.start(name, asg.LAUNCH_HOOK, instance_id)
    assert lifecycle.main(["launch-done", "--result", "ABANDON", "--reason", "the QA gate failed"], host=found) == 0
    assert actions.completed == [(name, "tritonfleet-launch", instance_id, "ABANDON")]


@pytest.mark.parametrize("reason, value", [
    ("a, b; c", "a b c"), ("", "no reason given"), ("x" * 400, "x" * 255), ("ok: s3://b/k @v1+2", "ok: s3://b/k @v1+2"),
])
def test_tag_values_keep_what_every_tagging_api_takes(reason, value):
    assert lifecycle.tag_value(reason) == value


# -- heartbeats -----------------------------------------------------------------------------------------------------

SLEEP = [sys.executable, "-c", "import sys, time; time.sleep(float(sys.argv[1])); sys.exit(int(sys.argv[2]))"]
# runs until a file appears (30 s at most), then exits with the status given: the test, not the machine's speed,
# decides how many heartbeat intervals the command outlives
UNTIL = [sys.executable, "-c", "import os, sys, time\n"
         "end = time.monotonic() + 30\n"
         "while not os.path.exists(sys.argv[1]) and time.monotonic() < end: time.sleep(0.02)\n"
         "sys.exit(int(sys.argv[2]))"]


def test_heartbeats_while_the_command_runs_are_bounded_in_count(group, host, tmp_path):
    name, instance_id = group
    found, actions, _, _ = host
    actions.start(name, asg.LAUNCH_HOOK, instance_id)
    lines: list[str] = []
    stop = tmp_path / "stop"
    calls: list[int] = []

    def beat():
        calls.append(1)
        lifecycle.record_heartbeat(found, asg.LAUNCH_HOOK)
        if len(calls) == 4:  # the command outlives the last allowed beat by 10 intervals
            threading.Timer(1.0, stop.touch).start()

    rc = lifecycle.heartbeat(UNTIL + [str(stop), "3"], every=0.1, max_beats=4, beat=beat, say=lines.append)
    assert rc == 3  # the command's own exit status
    assert stop.exists()  # it ran to its end, past the last beat
    assert actions.heartbeats == [(name, "tritonfleet-launch", instance_id)] * 4  # 14+ intervals, 4 beats
    assert lines == ["4 heartbeats sent, the most allowed: the hook's timeout bounds " + sys.executable +
                     " from now on"]


def test_a_short_command_gets_no_heartbeat_and_a_failing_beat_is_the_last(group, host, tmp_path):
    name, instance_id = group
    found, actions, _, _ = host
    assert lifecycle.heartbeat(SLEEP + ["0", "0"], every=5, max_beats=3, beat=lambda: 1 / 0) == 0
    # no lifecycle action open: the first heartbeat fails and no other is tried
    lines: list[str] = []
    calls: list[int] = []
    stop = tmp_path / "stop"

    def beat():
        calls.append(1)
        if len(calls) == 1:  # the command outlives the failed beat by 5 intervals
            threading.Timer(0.5, stop.touch).start()
        lifecycle.record_heartbeat(found, asg.LAUNCH_HOOK)

    assert lifecycle.heartbeat(UNTIL + [str(stop), "0"], every=0.1, max_beats=5, beat=beat, say=lines.append) == 0
    assert len(calls) == 1 and actions.heartbeats == []
    assert lines[0] == (f"heartbeat 1 failed, no more heartbeats: RecordLifecycleActionHeartbeat tritonfleet-launch for "
                        f"{instance_id} in {name}: ValidationError: No active Lifecycle Action found with instance ID "
                        f"{instance_id} (the group has no tritonfleet-launch hook, or its timeout ran out)")


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie no one reaped yet has stopped


def test_a_command_past_its_limit_is_stopped_with_what_it_started(tmp_path, monkeypatch):
    # SIGTERM stops it: the grace before SIGKILL (60 s here) and the command's own end (120 s) are never waited for
    monkeypatch.setattr(lifecycle, "STOP_GRACE", 60.0)
    beats: list[int] = []
    lines: list[str] = []
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    try:
        rc = lifecycle.heartbeat(["sh", "-c", f'sleep 120 & echo $! >"{pid_file}"; wait'], every=0.1, max_beats=100,
                                 limit=1.0, beat=lambda: beats.append(1), say=lines.append)
        assert rc == lifecycle.EXIT_LIMIT and time.monotonic() - started < 20  # the limit (1 s), not 60 s or more
        assert 1 <= len(beats) <= 10  # never more than limit / every (100 without the limit)
        assert lines == ["sh ran past its 1 s limit: stopping it"]
        pid = int(pid_file.read_text())
        for _ in range(100):  # the sleep the shell started is stopped with it (its process group)
            if not _running(pid):
                break
            time.sleep(0.05)
        assert not _running(pid)
    finally:
        if pid_file.exists() and pid_file.read_text().strip() and _running(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_the_heartbeat_command_line_runs_the_command_after_the_separator(tmp_path):
    out = tmp_path / "ran"
    closed = lifecycle.Host(lifecycle.Imds("http://127.0.0.1:9", timeout=1), region=REGION)
    rc = lifecycle.main(["heartbeat", "--every", "0.1", "--max", "2", "--", sys.executable, "-c",
                         f"import time; time.sleep(0.4); open({str(out)!r}, 'w').write('yes')"], host=closed)
    assert rc == 0 and out.read_text() == "yes"
    with pytest.raises(SystemExit):
        lifecycle.main(["heartbeat", "--every", "0", "--", "true"])


# -- termination ----------------------------------------------------------------------------------------------------

def _watch(found, triton, tmp_path, **kwargs):
    lines: list[str] = []
    options = {"every": 0.01, "max_polls": 50, "drain_wait": 5.0, "drain_every": 0.02,
               "metrics_urls": [triton.metrics], "say": lines.append, **kwargs}
    return lifecycle.watch_termination(found, **options), lines


def test_the_watcher_drains_until_nothing_is_in_flight_then_completes(group, host, stubs, tmp_path):
    name, instance_id = group
    found, actions, imds, timeline = host
    imds.states = ["InService", "InService", "Terminated"]
    triton = FakeTriton([4, 2, 1, 0], timeline)
    stubs.append(triton)
    actions.start(name, asg.TERMINATE_HOOK, instance_id)
    marker = tmp_path / "drained"
    drain = [sys.executable, "-c", f"import sys; open({str(marker)!r}, 'w').write(sys.argv[1])", "{instance_id}"]
    rc, lines = _watch(found, triton, tmp_path, drain_command=drain)
    assert rc == 0
    assert imds.looks == 3
    assert marker.read_text() == instance_id  # the drain command ran, with this instance's id
    # the hook is completed once, after the scrape that found nothing in flight
    assert timeline == [("scrape", 4), ("scrape", 2), ("scrape", 1), ("scrape", 0),
                        ("complete", "tritonfleet-terminate", "CONTINUE")]
    assert actions.completed == [(name, "tritonfleet-terminate", instance_id, "CONTINUE")]
    assert lines[-2:] == ["no request in flight on 1 Triton server(s)",
                          f"termination hook tritonfleet-terminate of {name} completed for {instance_id}: CONTINUE"]


def test_the_watcher_gives_up_waiting_after_its_bound_and_completes(group, host, stubs, tmp_path):
    name, instance_id = group
    found, actions, imds, timeline = host
    imds.states = ["Terminated"]
    triton = FakeTriton([5], timeline)
    stubs.append(triton)
    actions.start(name, asg.TERMINATE_HOOK, instance_id)
    started = time.monotonic()
    rc, lines = _watch(found, triton, tmp_path, drain_wait=1.0, drain_every=0.1,
                       drain_command=[sys.executable, "-c", "import sys; sys.exit('lb said no')"])
    # the bound is the count of scrapes (a slow machine makes fewer, not more); the time is a loose guard only
    # (the default wait is 300 s)
    assert rc == 0 and time.monotonic() - started < 30
    scrapes = [t for t in timeline if t[0] == "scrape"]
    assert 2 <= len(scrapes) <= 1.0 / 0.1 + 2
    assert timeline[-1] == ("complete", "tritonfleet-terminate", "CONTINUE")
    assert "5 request(s) still in flight after 1 s: completing the hook anyway" in lines
    assert any(x.endswith("failed (lb said no): waiting for the requests in flight all the same") for x in lines)


def test_the_watcher_exits_after_its_looks_and_says_a_metadata_problem_once(group, host, stubs):
    found, actions, imds, timeline = host
    lines: list[str] = []
    assert lifecycle.watch_termination(found, every=0.01, max_polls=5, say=lines.append) == lifecycle.EXIT_AGAIN
    assert imds.looks == 5 and actions.completed == [] and timeline == []
    assert lines == [f"5 looks at {lifecycle.TARGET_STATE} and no termination: exiting for a fresh watcher"]
    lines.clear()
    gone = lifecycle.Host(lifecycle.Imds("http://127.0.0.1:9", timeout=1))
    assert lifecycle.watch_termination(gone, every=0.01, max_polls=3, say=lines.append) == lifecycle.EXIT_AGAIN
    assert len(lines) == 2 and lines[0].startswith("instance metadata at http://127.0.0.1:9: ")


def test_a_server_that_stopped_has_nothing_in_flight_and_one_unread_is_not_drained(stubs):
    timeline: list = []
    triton = FakeTriton([0], timeline)
    stubs.append(triton)
    assert lifecycle.pending_requests([triton.metrics, "http://127.0.0.1:9/metrics"]) == (0, [])
    total, problems = lifecycle.pending_requests([triton.url + "/nothing-here", triton.metrics],
                                                 fetch=lambda *_: (503, ""))
    assert total == 0 and problems == [f"{triton.url}/nothing-here: HTTP 503", f"{triton.metrics}: HTTP 503"]


def test_the_servers_are_found_on_their_default_metrics_ports(stubs):
    timeline: list = []
    triton = FakeTriton([0], timeline)
    other = FakeImds("i-0")  # something else listening: not Triton's metrics
    stubs += [triton, other]
    port = int(triton.url.rsplit(":", 1)[1])
    assert lifecycle.discover_metrics([9, int(other.url.rsplit(":", 1)[1]), port]) == [triton.metrics]
    assert lifecycle.METRICS_BASE_PORT + lifecycle.METRICS_STRIDE * (lifecycle.MAX_SERVERS - 1) == 8152


def test_the_termination_hook_is_not_completed_without_a_pending_action(group, host, stubs, tmp_path):
    found, actions, imds, timeline = host
    imds.states = ["Terminated"]
    triton = FakeTriton([0], timeline)
    stubs.append(triton)
    rc, lines = _watch(found, triton, tmp_path)
    assert rc == 1 and actions.completed == []
    assert "No active Lifecycle Action found" in lines[-1]


def test_the_watcher_runs_in_a_thread_until_the_termination(group, host, stubs, tmp_path):
    """The service's shape: a loop that looks every few seconds while the instance serves."""
    name, instance_id = group
    found, actions, imds, timeline = host
    triton = FakeTriton([1, 0], timeline)
    stubs.append(triton)
    actions.start(name, asg.TERMINATE_HOOK, instance_id)
    result: list = []
    thread = threading.Thread(target=lambda: result.append(_watch(found, triton, tmp_path, max_polls=1000)))
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive() and actions.completed == []
    imds.states = ["Terminated"]
    thread.join(10)
    assert result[0][0] == 0 and actions.completed == [(name, "tritonfleet-terminate", instance_id, "CONTINUE")]
