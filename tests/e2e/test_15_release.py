"""Pull mode on the sandbox fleet (issue 27), asserted from outside: releases written with `tritonfleet models
release` (the CLI, as a user runs it), every host's answers by inference (tritonclient), its state over SSH,
and the S3 server's log. Two hosts: ``scratch`` in the ``canary`` group, ``trn1`` following the fleet.

- a fleet release reaches every host, live (the container is not restarted);
- a canary group release reaches only that group; the next fleet release takes it along again;
- a broken release is refused by each host, which keeps serving the previous one, with no failed request,
  and reports it (state file, textfile metric, ``tritonfleet status``);
- the agent SIGKILLed mid-sync is started again by systemd and finishes the release by itself;
- `tritonfleet models rollout` takes a release through the canary group to every host, and stops a broken
  one at the canary, which goes back to its previous release while the rest never sees it;
- an unchanged pointer costs each host one conditional GET per check, and a second run changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.e2e.helpers import assert_noop, host_ip, poll, pyinfra, ssh, write_inventory
from tests.e2e.test_07_models import ADD_SUB, BROKEN, _client, _infer, _model, _set
from tritonfleet.sandbox import fleet
from tritonfleet.sandbox.layout import logs_dir

CANARY, OTHER = "scratch2", "scratch3"  # the second fleet worker's hosts (tests/conftest.py: E2E_SECOND_FILES)
HOSTS = [CANARY, OTHER]
TRITONFLEET = str(Path(sys.executable).parent / "tritonfleet")
STATE = "/var/lib/tritonfleet/models-pull.json"
ANSWER = {"v1": 3.0, "v2": 103.0, "v3": None, "v4": 203.0}  # add_sub's answer to 2 + 1 in each release


def _code(release: str) -> str:
    if release == "v3":
        return BROKEN
    return ADD_SUB.replace("(in0 + in1)", f"(in0 + in1 + {ANSWER[release] - 3.0:g})") if release != "v1" else ADD_SUB


def release(root: str, name: str, group: str | None = None) -> str:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "sandbox", "AWS_SECRET_ACCESS_KEY": "sandbox"}
    cmd = [TRITONFLEET, "models", "release", f"{root}/{name}", "--root", root, "--endpoint-url", fleet.s3_endpoint(),
           "--region", fleet.S3_REGION] + (["--group", group] if group else [])
    proc = subprocess.run(cmd, text=True, capture_output=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def answer(host: str) -> float | None:
    try:
        return float(_infer(httpclient.InferenceServerClient(f"{host_ip(host)}:8000", network_timeout=5), "add_sub"))
    except Exception:  # noqa: BLE001 - a host that does not answer is what the caller polls past
        return None


def server_live(host: str) -> bool:
    try:
        return bool(httpclient.InferenceServerClient(f"{host_ip(host)}:8000", network_timeout=5).is_server_live())
    except Exception:  # noqa: BLE001 - no server there
        return False


def state(host: str) -> dict:
    return json.loads(ssh(host, f"cat {STATE}").stdout)


def serving(hosts: list[str], name: str, deadline: float = 30) -> float:
    """Seconds until every host answers with release ``name`` (polled by inference)."""
    started = time.monotonic()
    poll(f"{hosts} serving {name}", lambda: all(answer(h) == ANSWER[name] for h in hosts), deadline, interval=0.2,
         context=lambda: f"; answers {[answer(h) for h in hosts]}; states {[state(h) for h in hosts]}; journals "
         + "".join(ssh(h, "journalctl -u tritonfleet-models-pull --no-pager | tail -6", check=False).stdout
                   for h in hosts))
    return time.monotonic() - started


class Clients:
    """A bounded client per host (~20 requests per second each, at most 2400 requests or 120 s), counting
    requests that fail; the answer itself may be any release's."""

    def __init__(self, hosts: list[str]) -> None:
        self.hosts, self.ok, self.failures = hosts, 0, []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(h,), daemon=True) for h in hosts]

    def _run(self, host: str) -> None:
        client = httpclient.InferenceServerClient(f"{host_ip(host)}:8000", connection_timeout=5, network_timeout=5)
        started = time.monotonic()
        for _ in range(2400):
            if self._stop.is_set() or time.monotonic() - started > 120:
                break
            try:
                _infer(client, "add_sub")
                self.ok += 1
            except Exception as exc:  # noqa: BLE001 - counted and shown
                self.failures.append(f"{host}: {type(exc).__name__}: {exc}"[:200])
            time.sleep(0.05)

    def __enter__(self) -> Clients:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)


@pytest.fixture(scope="module")
def pulled(sandbox, tmp_path_factory):
    """Both hosts in pull mode on a release root of their own, serving v1."""
    s3 = _client()
    prefix = f"e2e-pull-{uuid.uuid4().hex[:8]}"
    root = f"s3://{fleet.S3_BUCKET}/{prefix}"
    for name in ("v1", "v2", "v3"):
        _set(s3, f"{prefix}/{name}/", _model("add_sub", _code(name)))
    release(root, "v1")
    base = tmp_path_factory.mktemp("pull")
    inv = write_inventory(base, HOSTS, extra={"models_s3_uri": root, "models_pull": True, "models_pull_interval": 1},
                          per_host={CANARY: {"models_pull_group": "canary"}})
    # hosts that serve already (earlier tests left them on the sandbox's S3 sync, whose containers read the same
    # /models/current) switch to pull mode with the models deploy alone; bare ones get the whole serve deploy
    serving_now = all(server_live(h) for h in HOSTS)
    run = pyinfra(inv, "deploys/models.py" if serving_now else "deploys/serve.py")
    assert run.returncode == 0, run.output[-5000:]
    assert [answer(h) for h in HOSTS] == [3.0, 3.0]
    yield s3, prefix, root, inv
    for name in ("v1", "v2", "v3", "v4"):
        _set(s3, f"{prefix}/{name}/", {})


def _container(host: str) -> tuple[str, str]:
    c = json.loads(ssh(host, "docker inspect triton").stdout)[0]
    return c["Id"], c["State"]["StartedAt"]


def test_a_fleet_release_reaches_every_host_live(pulled):
    _, _, root, _ = pulled
    before = {h: _container(h) for h in HOSTS}
    with Clients(HOSTS) as clients:
        out = release(root, "v2")
        seconds = serving(HOSTS, "v2")
    print(f"release v2 -> both hosts serving it in {seconds:.1f} s (interval 1 s); {clients.ok} requests")
    assert "v2" in out and seconds < 15
    assert clients.failures == [] and clients.ok > 0
    assert {h: _container(h) for h in HOSTS} == before
    for h in HOSTS:
        s = state(h)
        assert (s["release"], s["pointed"], s["failures"], s["last_error"]) == ("v2", "v2", 0, None), s


def test_a_canary_group_release_reaches_only_that_group(pulled):
    _, _, root, _ = pulled
    release(root, "v1", group="canary")
    serving([CANARY], "v1")
    time.sleep(3)  # three checks of the other host's pointer
    assert answer(OTHER) == ANSWER["v2"] and state(OTHER)["release"] == "v2"
    assert state(CANARY)["pointer"] == "RELEASE.canary"
    # the next fleet release rewrites the group's pointer too: the canary follows the fleet again
    release(root, "v2")
    serving(HOSTS, "v2")


def test_a_broken_release_is_refused_by_each_host_which_keeps_serving_and_reports_it(pulled):
    _, _, root, inv = pulled
    with Clients(HOSTS) as clients:
        release(root, "v3")
        poll("both hosts refusing v3", lambda: all(state(h)["failures"] >= 1 for h in HOSTS), 60, interval=0.5)
    assert clients.failures == [] and clients.ok > 0
    assert [answer(h) for h in HOSTS] == [103.0, 103.0]
    for h in HOSTS:
        s = state(h)
        assert s["release"] == "v2" and s["pointed"] == "v3" and "release v3" in s["last_error"], s
        assert "broken on purpose" in s["last_error"], s
        assert s["next_check"] > s["last_check"]
        metrics = ssh(h, "cat /var/lib/prometheus/node-exporter/tritonfleet_models_pull.prom").stdout
        assert 'tritonfleet_models_release_info{release="v2",' in metrics and "tritonfleet_models_release_behind 1" \
            in metrics
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    status = subprocess.run([TRITONFLEET, "status", "-i", str(inv)], text=True, capture_output=True, timeout=120,
                            env=env)
    assert re.search(r"v2 -> v3 failing", status.stdout), status.stdout + status.stderr
    # the fix: back to v2 on the pointer, taken at once (not after the back-off)
    release(root, "v2")
    poll("failures cleared", lambda: all(state(h)["failures"] == 0 for h in HOSTS), 15, interval=0.5)


def test_the_agent_killed_mid_sync_is_restarted_and_finishes_the_release(pulled):
    s3, prefix, root, _ = pulled
    tree = _model("add_sub", _code("v4"))
    tree["add_sub/1/weights.bin"] = os.urandom(96 * 1024 * 1024)
    _set(s3, f"{prefix}/v4/", tree)
    pid = ssh(OTHER, "systemctl show -p MainPID --value tritonfleet-models-pull").stdout.strip()
    release(root, "v4")
    poll("a sync of v4 in progress", lambda: ssh(OTHER, "ls -d /opt/tritonfleet/models/versions/.staging-* "
                                                     "2>/dev/null || true").stdout.strip(), 30, interval=0.1)
    ssh(OTHER, "systemctl kill -s KILL tritonfleet-models-pull")
    assert answer(OTHER) == ANSWER["v2"]  # current is still the complete v2
    serving(HOSTS, "v4", deadline=90)

    def main_pid() -> str | None:  # "0" while systemd waits its RestartSec before starting it again
        now = ssh(OTHER, "systemctl show -p MainPID --value tritonfleet-models-pull").stdout.strip()
        return now if now not in ("0", pid) else None

    poll("the agent started again by systemd", main_pid, 30, interval=0.5)
    assert state(OTHER)["release"] == "v4" and state(OTHER)["failures"] == 0
    left = ssh(OTHER, "ls -a /opt/tritonfleet/models/versions").stdout.split()
    assert not [d for d in left if d.startswith(".staging")], left


def rollout(root: str, inv: Path, name: str, reports: Path) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "sandbox", "AWS_SECRET_ACCESS_KEY": "sandbox",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([TRITONFLEET, "models", "rollout", name, "-i", str(inv), "--group", "canary", "--root", root,
                           "--endpoint-url", fleet.s3_endpoint(), "--region", fleet.S3_REGION, "--no-qa",
                           "--wait", "60", "--reports-dir", str(reports)],
                          text=True, capture_output=True, timeout=300, env=env)
    (report,) = [json.loads(p.read_text()) for p in sorted(reports.glob("release-rollout-*.json"))[-1:]]
    return proc, report


def test_a_release_rollout_goes_through_the_canary_group_to_every_host(pulled, tmp_path):
    _, _, root, inv = pulled
    with Clients(HOSTS) as clients:
        proc, report = rollout(root, inv, "v1", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [answer(h) for h in HOSTS] == [3.0, 3.0] and clients.failures == []
    assert "Traceback" not in proc.stderr and json.dumps(report).count("v1") >= 1


def test_a_release_rollout_of_a_broken_release_stops_at_the_canary_and_the_rest_never_sees_it(pulled, tmp_path):
    _, _, root, inv = pulled
    with Clients(HOSTS) as clients:
        proc, report = rollout(root, inv, "v3", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "broken on purpose" in proc.stdout + proc.stderr + json.dumps(report)
    assert [answer(h) for h in HOSTS] == [3.0, 3.0] and clients.failures == []
    other = state(OTHER)
    assert other["pointed"] == "v1" and other["failures"] == 0, other  # its pointer never named v3
    poll("the canary back on v1", lambda: state(CANARY)["pointed"] == "v1" and state(CANARY)["failures"] == 0, 30,
         interval=0.5)


def test_an_unchanged_pointer_is_one_conditional_get_per_check_and_a_second_run_changes_nothing(pulled):
    _, prefix, _, inv = pulled
    log = logs_dir() / "s3.log"
    offset = log.stat().st_size
    time.sleep(5)
    with open(log, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    ip = re.escape(host_ip(OTHER))
    # werkzeug colours a 304's request line (ANSI escapes)
    requests = re.findall(rf'^{ip} .*"(?:\x1b\[[0-9;]*m)?(\w+) (/[^ ]+) HTTP[^"]*?(?:\x1b\[0m)?" (\d+)', text, re.M)
    assert requests, text[-2000:]
    assert {(m, p.split("?")[0], code) for m, p, code in requests} == {("GET", f"/{fleet.S3_BUCKET}/{prefix}/RELEASE",
                                                                        "304")}
    assert 3 <= len(requests) <= 7, requests  # one a second
    assert_noop(pyinfra(inv, "deploys/models.py"))
