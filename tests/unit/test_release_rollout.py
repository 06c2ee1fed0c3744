"""Canary rollout of a release to pull-mode hosts (issue 27, part 2; tritonfleet/fleet/releaseroll.py,
``tritonfleet models rollout``): the pointers are real objects in moto's mocked S3 (fake keys only), and the
hosts' agents are simulated by :class:`FakeFleet`, whose hosts read their pointer from that S3 and serve what it
names after a delay (or refuse it, or never move): the stand-in for ``served_releases``, not what is tested.
The clock is simulated too, so a wait of minutes takes milliseconds."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from click.testing import CliRunner
from moto import mock_aws

from tritonfleet.face.cli import main as cli
from tritonfleet.fleet import gates
from tritonfleet.fleet import release as rel
from tritonfleet.fleet import releaseroll as rr

pytestmark = pytest.mark.pure

BUCKET = "models-bucket"
PREFIX = "fleet/models"
ROOT = f"s3://{BUCKET}/{PREFIX}"
PROM = "http://prom:9090"
ERROR = "release v2: model resnet: failed to load: version 1 of the model is missing"


@pytest.fixture(scope="module")
def aws():
    """A mocked S3 (one per module: starting one costs more than a test) with releases v1 and v2 (Triton model
    repositories)."""
    with pytest.MonkeyPatch.context() as mp:
        for var in ("AWS_PROFILE", "AWS_CA_BUNDLE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN",
                    "TRITONFLEET_REGION", "AWS_REGION", "TRITONFLEET_MODELS_ROOT", "TRITONFLEET_INVENTORY"):
            mp.delenv(var, raising=False)
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        with mock_aws():
            client = rel.client("us-east-1")
            client.create_bucket(Bucket=BUCKET)
            for release in ("v1", "v2"):
                put(client, f"{release}/resnet/config.pbtxt", 'platform: "onnxruntime_onnx"\n')
                put(client, f"{release}/resnet/1/model.onnx", "weights")
            yield client


@pytest.fixture
def s3(aws):
    """The mocked S3 with no pointer but the fleet's, naming v1."""
    for page in aws.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/RELEASE"):
        for o in page.get("Contents", []):
            aws.delete_object(Bucket=BUCKET, Key=o["Key"])
    put(aws, "RELEASE", "v1\n# released by hand\n")
    return aws


def put(s3, name: str, body: str) -> None:
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{name}", Body=body.encode())


def body_of(s3, name: str) -> str | None:
    try:
        return s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{name}")["Body"].read().decode()
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "NoSuchKey"
        return None


class Clock:
    """A monotonic clock that only sleeping moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.on_sleep = None  # called before each sleep (a test's Ctrl-C)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        if self.on_sleep is not None:
            self.on_sleep()
        self.now += seconds


class FakeFleet:
    """The pull agents of the hosts, simulated on each read: a host reads its pointer (``RELEASE.<group>``, else
    ``RELEASE``) from S3; ``delay`` seconds after its pointer changed (a new body) it serves the release the
    pointer names, unless it refuses that release (``refuse``: one failed try per ``delay``). A ``dead`` host's
    state never changes; an ``unreachable`` one has none."""

    def __init__(self, s3, clock, groups: dict[str, str | None], delay: float = 2.0) -> None:
        self.s3, self.clock, self.delay = s3, clock, delay
        self.groups = groups
        self.delays: dict[str, float] = {}
        self.refuse: dict[str, set[str]] = {}
        self.dead: set[str] = set()
        self.unreachable: set[str] = set()
        self.state: dict[str, dict[str, Any]] = {h: {"release": "v1", "pointed": "v1", "failures": 0, "last_error": None, "body": None,
                          "since": None} for h in groups}
        self.seen: dict[str, list[str]] = {h: ["v1"] for h in groups}  # every release its pointer named
        self.served_at: dict[tuple[str, str], float] = {}  # (host, release) -> when it first served it
        self.reads = 0

    def pointer(self, group: str | None, bodies: dict[str, str | None]) -> str | None:
        for name in ([f"RELEASE.{group}"] if group else []) + ["RELEASE"]:
            if name not in bodies:
                bodies[name] = body_of(self.s3, name)
            if bodies[name] is not None:
                return bodies[name]
        return None

    def read(self) -> dict[str, dict | None]:
        self.reads += 1
        now = self.clock()
        out: dict[str, dict | None] = {}
        bodies: dict[str, str | None] = {}  # each pointer read once per look
        for h, st in self.state.items():
            if h not in self.dead:
                body = self.pointer(self.groups[h], bodies)
                if body != st["body"]:
                    st["body"], st["since"] = body, now
                    st["pointed"] = rel.parse_pointer(body, ROOT) if body else None
                    if st["pointed"] and st["pointed"] not in self.seen[h]:
                        self.seen[h].append(st["pointed"])
                wanted = st["pointed"]
                due = st["since"] is not None and now - st["since"] >= self.delays.get(h, self.delay)
                if wanted and (st["release"] != wanted or st["failures"]) and due:
                    if wanted in self.refuse.get(h, set()):
                        st["failures"] += 1
                        st["last_error"] = ERROR if wanted == "v2" else f"release {wanted}: failed"
                        st["since"] = now  # the next try after another delay
                    else:
                        st["release"], st["failures"], st["last_error"] = wanted, 0, None
                        self.served_at.setdefault((h, wanted), now)
            out[h] = None if h in self.unreachable else {
                "release": st["release"], "pointed": st["pointed"], "failures": st["failures"],
                "last_error": st["last_error"], "last_check": now, "pointer": "RELEASE"}
        return out


GROUPS = {"c1": "canary", "c2": "canary", "r1": None, "r2": None, "r3": "blue"}


def hosts(groups=GROUPS, **extra):
    out = []
    for h, g in groups.items():
        data = {"models_pull": True, "models_s3_uri": ROOT + "/"}
        if g:
            data["models_pull_group"] = g
        if h == "c1":
            data["qa_suites"] = "qa/suites"
        data.update(extra.get(h, {}))
        out.append((h, data))
    return out


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def fleet(s3, clock):
    return FakeFleet(s3, clock, dict(GROUPS))


class QA:
    """The QA runs, recorded with the fleet's pointer at the time."""

    def __init__(self, s3, fail: dict[str, str] | None = None) -> None:
        self.s3, self.fail = s3, fail or {}
        self.runs: list[tuple[str, str | None]] = []

    def __call__(self, host: str) -> tuple[bool, str]:
        self.runs.append((host, body_of(self.s3, "RELEASE")))
        return (False, self.fail[host]) if host in self.fail else (True, "")


def roll(tmp_path, s3, fleet, clock, host_list=None, qa_runner=None, evaluate=None, **kw):
    """One rollout (rr.main with everything injected); (exit code, the report it wrote)."""
    reports = tmp_path / "reports"
    opts = rr.Options(**{"inventory": "inv.py", "release": "v2", "wait": 30, "reports_dir": str(reports), **kw})
    code = rr.main(opts, hosts=host_list if host_list is not None else hosts(), s3=s3, read_states=fleet.read,
                   run_qa=qa_runner if qa_runner is not None else QA(s3), evaluate=evaluate, clock=clock, sleep=clock.sleep)
    (path,) = reports.glob("release-rollout-*.json")
    return code, json.loads(path.read_text())


def statuses(report) -> dict[str, str]:
    return {h["host"]: h["status"] for h in report["hosts"]}


def one_line(text: str) -> str:
    assert text and "\n" not in text and "Traceback" not in text
    return text


# -- a release that passes -----------------------------------------------------------------------------------------

def test_a_good_release_passes_the_canary_then_reaches_every_host(tmp_path, s3, fleet, clock, capsys):
    put(s3, "RELEASE.blue", "v1\n")  # a group pointer of the rest: the fleet's release rewrites it
    qa = QA(s3)
    code, report = roll(tmp_path, s3, fleet, clock, qa_runner=qa)
    assert code == 0, report
    assert statuses(report) == dict.fromkeys(GROUPS, "updated")
    assert report["ok"] and report["failures"] == 0 and report["stopped"] is None and report["rollback"] is None
    for name in ("RELEASE", "RELEASE.canary", "RELEASE.blue"):
        assert rel.parse_pointer(body_of(s3, name), ROOT) == "v2", name
    # the canary first: the rest got the release only after every canary host served it and QA passed
    canary_done = max(fleet.served_at[(h, "v2")] for h in ("c1", "c2"))
    assert min(fleet.served_at[(h, "v2")] for h in ("r1", "r2", "r3")) > canary_done
    assert qa.runs == [("c1", "v1\n# released by hand\n")]  # on the canary host with qa_suites, before the fleet's
    assert report["gates"]["serve"]["ok"] and report["gates"]["serve"]["hosts"]["c1"] == {"serving": True,
                                                                                          "seconds": 2.0}
    assert report["gates"]["qa"]["ok"] and report["gates"]["qa"]["hosts"] == {"c1": {"ok": True, "why": ""}}
    assert report["gates"]["metrics"] == {"ok": True, "skipped": "no --prometheus"}
    assert report["previous"] == "v1" and report["pointers_before"] == {"RELEASE": "v1", "RELEASE.blue": "v1"}
    assert report["fleet"]["written"] == ["RELEASE", "RELEASE.blue", "RELEASE.canary"]
    assert report["phases"]["canary"] == 2.0 and report["phases"]["fleet"] == 2.0
    assert [h["before"] for h in report["hosts"]] == ["v1"] * 5
    assert [h["serving"] for h in report["hosts"]] == ["v2"] * 5
    out = capsys.readouterr().out
    assert "release rollout: v2 (canary: RELEASE.canary)" in out and "canary gate: the 2 canary host(s) serve v2" in out


def test_a_full_uri_and_root_option_name_the_same_release(tmp_path, s3, fleet, clock):
    code, report = roll(tmp_path, s3, fleet, clock, release=f"{ROOT}/v2/", root=ROOT + "/", qa_runner=QA(s3))
    assert code == 0 and report["release"] == "v2" and report["root"] == ROOT


def test_a_host_that_failed_the_release_before_is_judged_on_its_next_try(tmp_path, s3, fleet, clock):
    """A canary host whose state still says it failed v2 (an earlier group release) is not failed at once: the
    rollout's write is a new pointer, which the agent tries again."""
    put(s3, "RELEASE.canary", "v2\n")
    fleet.refuse["c1"] = {"v2"}
    fleet.read()
    clock.now += 10
    fleet.read()
    assert fleet.state["c1"]["failures"] == 1 and fleet.state["c1"]["pointed"] == "v2"
    fleet.refuse["c1"] = set()  # the release was fixed since
    code, report = roll(tmp_path, s3, fleet, clock)
    assert code == 0, report["gates"]["serve"]


# -- a canary that fails ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("group_pointer", [None, "v1\n# the canary's own, by hand\n"])
def test_a_canary_host_refusing_the_release_rolls_the_group_pointer_back(tmp_path, s3, fleet, clock, group_pointer):
    if group_pointer:
        put(s3, "RELEASE.canary", group_pointer)
    put(s3, "RELEASE.blue", "v1\n")
    fleet_body, blue_body = body_of(s3, "RELEASE"), body_of(s3, "RELEASE.blue")
    fleet.refuse["c2"] = {"v2"}
    fleet.delays["c2"] = 4.0
    code, report = roll(tmp_path, s3, fleet, clock, wait=60)
    assert code == 1
    assert statuses(report) == {"c1": "rolled back", "c2": "rolled back", "r1": "not started",
                                "r2": "not started", "r3": "not started"}
    # the group's pointer is what it was (or gone again: the group follows RELEASE); the rest's never moved
    assert body_of(s3, "RELEASE.canary") == group_pointer
    assert body_of(s3, "RELEASE") == fleet_body and body_of(s3, "RELEASE.blue") == blue_body
    for h in ("r1", "r2", "r3"):
        assert fleet.seen[h] == ["v1"], h
    assert fleet.served_at[("c1", "v2")] and fleet.state["c1"]["release"] == "v1"  # it took v2, and left it
    serve = report["gates"]["serve"]
    assert not serve["ok"] and serve["line"].startswith("c2 refused v2: serves v1, its pointer names v2: 1 failed try")
    assert ERROR in serve["line"] and ERROR in report["stopped"]
    assert report["phases"]["canary"] == 4.0  # at once: not the whole --wait
    assert report["gates"]["qa"] is None and report["fleet"] is None
    assert report["rollback"]["pointers"] == {"RELEASE.canary": "restored" if group_pointer else "deleted"}
    assert report["rollback"]["release"] == "v1"
    rows = {h["host"]: h for h in report["hosts"]}
    assert ERROR in rows["c2"]["message"] and rows["c1"]["serving"] == "v1"


def test_a_canary_that_does_not_serve_within_the_wait_is_rolled_back(tmp_path, s3, fleet, clock):
    fleet.delays["c2"] = 1000
    code, report = roll(tmp_path, s3, fleet, clock, wait=30)
    assert code == 1
    assert statuses(report)["c1"] == statuses(report)["c2"] == "rolled back"
    assert {statuses(report)[h] for h in ("r1", "r2", "r3")} == {"not started"}
    line = report["gates"]["serve"]["line"]
    assert line == "not serving v2 after 30s: c2: serves v1, its pointer names v2", line
    assert report["phases"]["canary"] == 30.0
    assert body_of(s3, "RELEASE.canary") is None and rel.parse_pointer(body_of(s3, "RELEASE"), ROOT) == "v1"
    assert report["gates"]["serve"]["hosts"]["c1"]["serving"] is True


def test_a_canary_host_that_does_not_come_back_is_a_failed_rollback(tmp_path, s3, fleet, clock):
    fleet.refuse["c2"] = {"v2"}
    fleet.refuse["c1"] = {"v1"}  # took v2, then cannot go back
    code, report = roll(tmp_path, s3, fleet, clock, wait=20)
    assert code == 1
    assert statuses(report)["c1"] == "rollback failed" and statuses(report)["c2"] == "rolled back"
    assert "rollback: not serving v1 again after 20s: serves v2, its pointer names v1" in \
        next(h["message"] for h in report["hosts"] if h["host"] == "c1")


def test_a_failed_qa_gate_rolls_the_canary_back(tmp_path, s3, fleet, clock):
    qa = QA(s3, fail={"c1": "QA failed: resnet top1 0.42 < 0.75"})
    code, report = roll(tmp_path, s3, fleet, clock, qa_runner=qa)
    assert code == 1 and qa.runs == [("c1", "v1\n# released by hand\n")]
    assert statuses(report)["c1"] == "rolled back" and statuses(report)["r1"] == "not started"
    assert report["gates"]["qa"]["line"] == "c1: QA failed: QA failed: resnet top1 0.42 < 0.75"
    assert report["stopped"].startswith("QA gate: c1: QA failed") and body_of(s3, "RELEASE.canary") is None


def test_no_qa_skips_the_qa_gate(tmp_path, s3, fleet, clock):
    qa = QA(s3, fail={"c1": "would fail"})
    code, report = roll(tmp_path, s3, fleet, clock, qa_runner=qa, qa=False)
    assert code == 0 and qa.runs == [] and report["gates"]["qa"] == {"ok": True, "skipped": "--no-qa"}


class Evaluate:
    def __init__(self, clock, result) -> None:
        self.clock, self.result = clock, result
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, url, canary, rest, window, **kw):
        self.calls.append((url, canary, rest, window, kw, self.clock()))
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


BREACH = gates.Verdict(False, "30s ending 2026-11-27T03:40:00Z", [
    gates.Measure("requests", 900, 3000, None, False, "requests: canary 900, others 3000"),
    gates.Measure("error ratio", 0.2, 0.001, 0.01, True, "error ratio: canary 0.2 > max 0.01 (others 0.001)")])
PASS = gates.Verdict(True, "30s ending 2026-11-27T03:40:00Z", [
    gates.Measure("requests", 900, 3000, None, False, "requests: canary 900, others 3000")])


def test_the_metric_gate_compares_canary_and_rest_after_the_bake_and_a_breach_rolls_back(tmp_path, s3, fleet, clock):
    evaluate = Evaluate(clock, BREACH)
    code, report = roll(tmp_path, s3, fleet, clock, evaluate=evaluate, prometheus=PROM, bake=30,
                        max_error_ratio=0.02, max_latency_ratio=2.0)
    ((url, canary, rest, window, kw, at),) = evaluate.calls
    assert (url, canary, rest, window) == (PROM, ["c1", "c2"], ["r1", "r2", "r3"], 30)
    assert kw == {"max_error_ratio": 0.02, "max_latency_ratio": 2.0}
    assert at - max(fleet.served_at[(h, "v2")] for h in ("c1", "c2")) >= 30  # after the bake
    assert code == 1 and statuses(report)["c1"] == "rolled back" and statuses(report)["r2"] == "not started"
    assert report["gates"]["metrics"]["line"] == "error ratio: canary 0.2 > max 0.01 (others 0.001) over 30s ending " \
                                                 "2026-11-27T03:40:00Z"
    assert report["stopped"].startswith("metric gate: error ratio: canary 0.2") and report["phases"]["bake"] == 30.0
    assert body_of(s3, "RELEASE.canary") is None and all(fleet.seen[h] == ["v1"] for h in ("r1", "r2", "r3"))


@pytest.mark.parametrize("result, code", [(PASS, 0), (gates.GateError("prometheus http://prom:9090: timed out"), 1)])
def test_the_metric_gate_passes_or_cannot_be_evaluated(tmp_path, s3, fleet, clock, result, code):
    got, report = roll(tmp_path, s3, fleet, clock, evaluate=Evaluate(clock, result), prometheus=PROM)
    assert got == code
    if code:
        assert report["gates"]["metrics"] == {"ok": False,
                                              "line": "gates not evaluated: prometheus http://prom:9090: timed out"}
        assert statuses(report)["c2"] == "rolled back"
    else:
        assert report["gates"]["metrics"]["ok"] and report["phases"]["bake"] == rr.DEFAULT_BAKE


@pytest.mark.parametrize("how", ["signal", "KeyboardInterrupt"])
def test_ctrl_c_during_the_canary_rolls_its_pointer_back(tmp_path, s3, fleet, clock, how):
    def ctrl_c():
        clock.on_sleep = None
        if how == "signal":
            os.kill(os.getpid(), signal.SIGINT)  # main()'s handler
        else:
            raise KeyboardInterrupt

    clock.on_sleep = ctrl_c
    before = signal.getsignal(signal.SIGINT)
    code, report = roll(tmp_path, s3, fleet, clock)
    assert signal.getsignal(signal.SIGINT) is before
    assert code == 1 and report["stopped"] == "interrupted"
    assert report["gates"]["serve"]["line"] == "interrupted" and report["phases"]["canary"] <= 1.0  # at once
    assert body_of(s3, "RELEASE.canary") is None and rel.parse_pointer(body_of(s3, "RELEASE"), ROOT) == "v1"
    assert statuses(report)["c1"] == "rolled back" and statuses(report)["r1"] == "not started"


@pytest.mark.parametrize("during", ["qa", "metrics"])
def test_ctrl_c_during_a_gate_that_passes_still_rolls_the_canary_back(tmp_path, s3, fleet, clock, during):
    def ctrl_c(*args, **kw):
        os.kill(os.getpid(), signal.SIGINT)  # while the gate runs
        return (True, "") if during == "qa" else PASS

    kw: dict[str, Any] = {"qa_runner": ctrl_c} if during == "qa" else {"evaluate": ctrl_c, "prometheus": PROM}
    code, report = roll(tmp_path, s3, fleet, clock, **kw)
    assert code == 1 and report["stopped"] == "interrupted" and report["gates"][during]["ok"]
    assert body_of(s3, "RELEASE.canary") is None and rel.parse_pointer(body_of(s3, "RELEASE"), ROOT) == "v1"
    assert statuses(report)["c1"] == "rolled back" and fleet.seen["r1"] == ["v1"]


def test_ctrl_c_during_the_fleet_phase_ends_the_wait_and_leaves_the_release_out(tmp_path, s3, fleet, clock):
    def ctrl_c():
        if rel.parse_pointer(body_of(s3, "RELEASE"), ROOT) == "v2":
            clock.on_sleep = None
            os.kill(os.getpid(), signal.SIGINT)

    clock.on_sleep = ctrl_c
    code, report = roll(tmp_path, s3, fleet, clock)
    assert code == 1 and report["stopped"] == "interrupted while the fleet's hosts were awaited"
    assert rel.parse_pointer(body_of(s3, "RELEASE"), ROOT) == "v2" and report["rollback"] is None
    assert statuses(report) == {"c1": "updated", "c2": "updated", "r1": "not serving", "r2": "not serving",
                                "r3": "not serving"}
    assert report["hosts"][2]["message"] == "interrupted before it was seen serving: serves v1, its pointer names v2"


# -- the fleet phase -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how, said", [
    ("refuse", f"not serving v2 after 30s: serves v1, its pointer names v2: 1 failed try; {ERROR}"),
    ("dead", "not serving v2 after 30s: serves v1"),
    ("unreachable", "not serving v2 after 30s: no pull state (unreachable, or its pull agent never wrote one)"),
])
def test_a_host_of_the_rest_that_never_serves_counts_as_failed(tmp_path, s3, fleet, clock, how, said):
    if how == "refuse":
        fleet.refuse["r2"] = {"v2"}
        fleet.delays["r2"] = 20  # one try in the wait
    else:
        getattr(fleet, how).add("r2")  # its agent is stuck, or the host cannot be reached
    code, report = roll(tmp_path, s3, fleet, clock)
    assert code == 1
    assert statuses(report) == {"c1": "updated", "c2": "updated", "r1": "updated", "r2": "not serving",
                                "r3": "updated"}
    row = next(h for h in report["hosts"] if h["host"] == "r2")
    assert row["message"] == said and row["seconds"] is None
    assert report["failures"] == 1 and report["stopped"] is None and not report["ok"]
    assert report["phases"]["fleet"] == 30.0
    assert rel.parse_pointer(body_of(s3, "RELEASE"), ROOT) == "v2"  # the fleet's release is not undone


# -- refused before anything changes ------------------------------------------------------------------------------

def _no_pull(h):
    return {"r2": {"models_pull": False}}


@pytest.mark.parametrize("host_list, kw, said", [
    (hosts(), {"group": "green"}, "inv.py: no host has models_pull_group 'green' (its groups: blue, canary)"),
    (hosts({"r1": None}), {}, "inv.py: no host has models_pull_group 'canary' (no host has a models_pull_group)"),
    (hosts(r3={"models_s3_uri": f"s3://{BUCKET}/other"}), {},
     f"inv.py: the hosts follow 2 release roots ({ROOT} (c1, c2, r1 and 1 more); s3://{BUCKET}/other (r3))"),
    (hosts(r2={"models_pull": False}, r3={"models_pull": "false"}), {}, "inv.py: r2, r3: models_pull is not true"),
    (hosts(r1={"models_s3_uri": None}), {}, "r1: no models_s3_uri (the release root it follows)"),
    (hosts(r1={"models_s3_uri": "s3://x"}), {}, "r1: models_s3_uri: release root 's3://x'"),
    ([], {}, "inv.py: no hosts"),
    (hosts({"c1": "canary"}), {"prometheus": PROM}, "--prometheus: every host of inv.py is in group 'canary'"),
    (hosts(), {"bake": 30}, "--bake needs --prometheus"),
    (hosts(), {"wait": 0}, "--wait 0: expected seconds above 0"),
    (hosts(), {"group": "Canary"}, "group 'Canary': expected 1-63 of a-z 0-9 _ -"),
    (hosts(), {"release": "v9"}, f"{ROOT}/v9/ holds no objects"),
    (hosts(), {"release": "s3://other/p/v2"}, "is not below the release root"),
])
def test_refused_in_one_line_before_anything_changes(tmp_path, s3, fleet, clock, host_list, kw, said):
    with pytest.raises(rel.ReleaseError) as info:
        roll(tmp_path, s3, fleet, clock, host_list=host_list, **kw)
    assert said in one_line(str(info.value)), str(info.value)
    assert body_of(s3, "RELEASE") == "v1\n# released by hand\n" and body_of(s3, "RELEASE.canary") is None
    assert not list((tmp_path / "reports").glob("release-rollout-*"))


def test_a_root_option_overrides_the_hosts_roots(tmp_path, s3, fleet, clock):
    mixed = hosts(r3={"models_s3_uri": f"s3://{BUCKET}/other"})
    assert rr.plan(rr.Options("inv.py", "v2", root=ROOT), mixed).root == ROOT
    code, report = roll(tmp_path, s3, fleet, clock, host_list=mixed, root=ROOT)
    assert code == 0 and report["root"] == ROOT


def test_a_canary_without_a_release_to_go_back_to_or_a_pull_state_is_refused(tmp_path, s3, fleet, clock):
    s3.delete_object(Bucket=BUCKET, Key=f"{PREFIX}/RELEASE")
    with pytest.raises(rr.ReleaseRolloutError, match="neither RELEASE.canary nor RELEASE exists"):
        roll(tmp_path, s3, fleet, clock)
    put(s3, "RELEASE.canary", "../v1\n")
    with pytest.raises(rr.ReleaseRolloutError, match="RELEASE.canary names no release"):
        roll(tmp_path, s3, fleet, clock)
    put(s3, "RELEASE.canary", "v1\n")
    fleet.unreachable.add("c2")
    with pytest.raises(rr.ReleaseRolloutError) as info:
        roll(tmp_path, s3, fleet, clock)
    assert one_line(str(info.value)).startswith("c2: no pull state: a canary host must run the pull agent")
    assert body_of(s3, "RELEASE.canary") == "v1\n" and body_of(s3, "RELEASE") is None


# -- pure pieces ------------------------------------------------------------------------------------------------------

def test_serves_and_refused_read_the_agents_state():
    good = {"release": "v2", "pointed": "v2", "failures": 0}
    assert rr.serves(good, "v2") and not rr.serves(good, "v3") and not rr.serves(None, "v2")
    assert not rr.serves({**good, "failures": 1}, "v2") and not rr.serves({**good, "pointed": "v3"}, "v2")
    bad = {"release": "v1", "pointed": "v2", "failures": 1, "last_error": "x"}
    assert rr.refused(bad, "v2", None) and rr.refused(bad, "v2", {"pointed": "v1", "failures": 4})
    assert not rr.refused(bad, "v2", bad) and rr.refused({**bad, "failures": 2}, "v2", bad)
    assert not rr.refused({**bad, "pointed": "v1"}, "v2", None) and not rr.refused({**bad, "failures": 0}, "v2", None)


# -- the command line ------------------------------------------------------------------------------------------------

def inventory(tmp_path: Path, root: str = ROOT) -> str:
    f = tmp_path / "inv.py"
    f.write_text("canary = (['c1', 'c2'], {'models_pull_group': 'canary'})\n"
                 "rest = ['r1', 'r2']\n"
                 "lb = (['lb1'], {'instance_type': 'm5.large'})\n")
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "all.py").write_text(f"models_pull = True\nmodels_s3_uri = {root!r}\n")
    return str(f)


def test_cli_rolls_a_release_out(tmp_path, s3, monkeypatch):
    from tritonfleet.access import health

    fleet = FakeFleet(s3, lambda: 0.0, {"c1": "canary", "c2": "canary", "r1": None, "r2": None}, delay=0)
    monkeypatch.setattr(health, "served_releases", lambda inv: fleet.read())
    inv = inventory(tmp_path)
    result = CliRunner().invoke(cli, ["models", "rollout", "v2", "-i", inv, "--region", "us-east-1",
                                      "--reports-dir", str(tmp_path / "reports")])
    assert result.exit_code == 0, result.output
    assert "canary gate: the 2 canary host(s) serve v2" in result.output
    assert rel.parse_pointer(body_of(s3, "RELEASE"), ROOT) == "v2" and fleet.state["r2"]["release"] == "v2"
    (path,) = (tmp_path / "reports").glob("release-rollout-*.json")
    assert json.loads(path.read_text())["canary"] == ["c1", "c2"]  # lb1 is no pull host: left out


def test_cli_refusals_are_one_line(tmp_path, s3):
    inv = inventory(tmp_path)
    for args, said in ((["v2", "-i", inv, "--group", "green"], "no host has models_pull_group 'green'"),
                       (["v2", "-i", str(tmp_path / "nope.py")], "nope.py"),
                       (["v2"], "Missing option '--inventory'")):
        result = CliRunner().invoke(cli, ["models", "rollout", *args, "--reports-dir", str(tmp_path / "r")])
        assert result.exit_code in (1, 2) and isinstance(result.exception, SystemExit), result.output
        lines = [x for x in result.output.strip().splitlines() if x.startswith("Error")]
        assert len(lines) == 1 and said in lines[0], result.output
        assert "Traceback" not in result.output
    assert body_of(s3, "RELEASE") == "v1\n# released by hand\n"


def test_cli_help_names_the_options():
    result = CliRunner().invoke(cli, ["models", "rollout", "--help"])
    assert result.exit_code == 0
    for option in ("--inventory", "--group", "--root", "--endpoint-url", "--region", "--wait", "--qa / --no-qa",
                   "--prometheus", "--bake", "--max-error-ratio", "--max-latency-ratio", "--reports-dir"):
        assert option in result.output, option
