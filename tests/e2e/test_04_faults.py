"""Faults must never leave serving worse than before the run (sandbox e2e, asserted from outside:
docker inspect over SSH and tritonclient against the host)."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest
import tritonclient.http as httpclient

from tests.e2e.helpers import COPY_MODE, host_ip, pyinfra, ssh, write_inventory
from tests.e2e.test_01_sandbox import _check_add_sub
from tritonfleet.sandbox import fleet

HOST = "scratch2"  # its own host: this file runs on the second fleet worker (tests/conftest.py)
SAMPLES = fleet.SAMPLES


def _container(name: str = "triton") -> dict:
    return json.loads(ssh(HOST, f"docker inspect {name}").stdout)[0]


@pytest.fixture(scope="module")
def repo(sandbox, tmp_path_factory):
    """A controller-side model repository (a copy of the sandbox sample) served on a bare host."""
    fleet.reset_host(HOST)
    base = tmp_path_factory.mktemp("faults")
    models = base / "models"
    shutil.copytree(SAMPLES, models)
    inv = write_inventory(base, [HOST], extra={"models_source": str(models), **COPY_MODE})
    run = pyinfra(inv, "deploys/serve.py")
    assert run.returncode == 0, run.output[-5000:]
    return base, models


def _run(base, models, *args, **extra):
    inv = write_inventory(base, [HOST], extra={"models_source": str(models), **COPY_MODE, **extra})
    return pyinfra(inv, *args, "deploys/serve.py")


def test_a_new_container_that_fails_its_gate_is_rolled_back(repo):
    base, models = repo
    before = _container()
    run = _run(base, models, triton_extra_args=["--log-verbose=not-a-number"], triton_health_timeout=60)
    assert run.returncode != 0
    assert "the new triton failed its health gate; rolled back to the previous container" in run.output
    assert "which serves again" in run.output
    after = _container()
    assert after["Config"]["Labels"]["com.tritonfleet.spec"] == before["Config"]["Labels"]["com.tritonfleet.spec"]
    assert after["State"]["Running"] and "--log-verbose=not-a-number" not in after["Args"]
    _check_add_sub(host_ip(HOST), 8000, 8001)
    record = json.loads(ssh(HOST, "cat /var/lib/tritonfleet/servers/triton.json").stdout)
    assert record["spec"] == before["Config"]["Labels"]["com.tritonfleet.spec"]  # the record was not advanced


def test_a_broken_model_change_fails_with_tritons_reason_and_is_restored(repo):
    base, models = repo
    before = _container()
    model_py = models / "add_sub" / "1" / "model.py"
    good = model_py.read_text()
    model_py.write_text(good + "\n    def initialize(self, args):\n        raise RuntimeError('broken on purpose')\n")
    try:
        run = _run(base, models)
        assert run.returncode != 0
        assert "model add_sub did not load" in run.output and "broken on purpose" in run.output
        assert "restored the previous version of add_sub, which serves again" in run.output
        assert _container()["Id"] == before["Id"]
        _check_add_sub(host_ip(HOST), 8000, 8001)
        live = ssh(HOST, "cat /opt/tritonfleet/models/add_sub/1/model.py").stdout
        assert "broken on purpose" not in live  # a restart would not meet the broken files
    finally:
        model_py.write_text(good)
    run = _run(base, models)
    assert run.returncode == 0, run.output[-4000:]


def test_a_new_model_is_loaded_and_a_removed_one_leaves_no_trace(repo):
    base, models = repo
    before = _container()
    shutil.copytree(models / "add_sub", models / "add_sub2")
    conf = models / "add_sub2" / "config.pbtxt"
    conf.write_text(conf.read_text().replace('name: "add_sub"', 'name: "add_sub2"'))
    run = _run(base, models)
    assert run.returncode == 0, run.output[-4000:]
    client = httpclient.InferenceServerClient(f"{host_ip(HOST)}:8000")
    assert client.is_model_ready("add_sub2") and _container()["Id"] == before["Id"]

    shutil.rmtree(models / "add_sub2")
    run = _run(base, models)
    assert run.returncode == 0, run.output[-4000:]
    assert not client.is_model_ready("add_sub2")
    assert ssh(HOST, "ls /opt/tritonfleet/models").stdout.split() == ["add_sub"]
    # a restart meets a clean repository (no empty add_sub2/1 left to crash-loop on)
    ssh(HOST, "docker restart triton >/dev/null")
    _check_add_sub(host_ip(HOST), 8000, 8001)
    assert _container()["RestartCount"] == 0

    second = _run(base, models)
    assert second.returncode == 0 and second.totals.get("changed") == 0, second.output[-3000:]


def test_status_asks_docker_and_triton(repo):
    """Docker stopped, Triton serving (live-restore): status says both; a stopped server fails the exit code."""
    from tritonfleet.face.status import fleet_status

    base, models = repo
    inv = write_inventory(base, [HOST], extra={"models_source": str(models), **COPY_MODE})
    ssh(HOST, "systemctl stop docker.socket docker.service")
    try:
        (row,) = fleet_status(inv)
        assert row["state"].startswith("docker not answering"), row
        assert row["ready_models"] == "add_sub" and row["serving"] is True
    finally:
        ssh(HOST, "systemctl start docker.service")
    ssh(HOST, "docker stop triton >/dev/null")
    try:
        (row,) = fleet_status(inv)
        assert row["state"] == "exited" and row["ready_models"] == "not answering" and row["serving"] is False
        ssh(HOST, "docker rm -f triton >/dev/null")
        (row,) = fleet_status(inv)
        assert row["state"] == "missing (expected triton)" and row["serving"] is False
    finally:
        run = _run(base, models)  # the next run brings the server back, and keeps the rollback target
        assert run.returncode == 0, run.output[-3000:]
    record = json.loads(ssh(HOST, "cat /var/lib/tritonfleet/servers/triton.json").stdout)
    assert record["previous"] is None or record["previous"]["spec"] != record["spec"]


def test_a_deleted_server_record_is_put_back_by_the_next_run(repo):
    """Issue 20 part 9, as found: the server record deleted on a converged host; the rerun writes it back
    (rollback and `status --previous` read it), 0600."""
    base, models = repo
    path = "/var/lib/tritonfleet/servers/triton.json"
    before = json.loads(ssh(HOST, f"cat {path}").stdout)
    started = _container()["State"]["StartedAt"]
    ssh(HOST, f"rm {path}")
    run = _run(base, models)
    assert run.returncode == 0 and run.totals["changed"] >= 1, run.output[-3000:]
    after = json.loads(ssh(HOST, f"cat {path}").stdout)
    assert (after["spec"], after["image"], after["run_args"]) == (before["spec"], before["image"], before["run_args"])
    assert ssh(HOST, f"stat -c %a {path}").stdout.strip() == "600"
    assert _container()["State"]["StartedAt"] == started  # written back without touching the container
    # (the run after it changes nothing: tests/fake/operations/triton.container/up_to_date.json)


# Holds dpkg's frontend lock until a process shows it waits for it (the packages script, whose text names the
# lock's holder), then 3 s more so the wait is real; at most 120 s. (The marker is split so that this
# script's own command line does not match it.)
LOCK_HOLDER = """\
import fcntl, os, time
lock = open("/var/lib/dpkg/lock-frontend", "w")
fcntl.lockf(lock, fcntl.LOCK_EX)
marker, end = b"dpkg lock, " + b"held by", time.monotonic() + 120


def waiter():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker in f.read():
                    return True
        except OSError:
            pass
    return False


while time.monotonic() < end and not waiter():
    time.sleep(0.2)
time.sleep(3)
"""


def test_a_held_dpkg_lock_is_waited_for_and_an_interrupted_dpkg_repaired(sandbox, tmp_path):
    """Like a re-run right after a killed run: another apt still holds the lock, and dpkg was left
    half-configured. The run waits (naming the holder), repairs dpkg, and completes."""
    # something to install again (from the sandbox's own repositories)
    ssh(HOST, "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q aws-neuronx-tools >/dev/null")
    # a package left unpacked but not configured: what a killed `apt-get install` leaves
    ssh(HOST, "set -e; d=$(mktemp -d); mkdir -p $d/DEBIAN; printf 'Package: tf-interrupted\\nVersion: 1\\n"
              "Architecture: all\\nMaintainer: t <t@example.com>\\nDescription: t\\n' > $d/DEBIAN/control; "
              "dpkg-deb -b $d /tmp/tf-interrupted.deb >/dev/null; dpkg --unpack /tmp/tf-interrupted.deb >/dev/null")
    assert ssh(HOST, "dpkg-query -W -f='${db:Status-Abbrev}' tf-interrupted").stdout.startswith("iU")
    # apt's lock is an fcntl lock: hold it the way another apt would, until the run is seen waiting for it
    ssh(HOST, "cat > /tmp/tf-lock-holder.py", input=LOCK_HOLDER)
    ssh(HOST, "rm -f /var/lib/tritonfleet/apt-lists.stamp; "
              "(setsid python3 /tmp/tf-lock-holder.py >/dev/null 2>&1 &); sleep 1")
    run = _run(*_base_models(tmp_path), "-vvv")  # pyinfra shows command output with -vvv (or when it fails)
    assert run.returncode == 0, run.output[-4000:]
    assert "waiting up to 300s for the dpkg lock, held by" in run.output and "tf-lock-holder.py" in run.output
    assert ssh(HOST, "dpkg-query -W -f='${db:Status-Abbrev}' tf-interrupted").stdout.startswith("ii")
    assert "repairing an interrupted dpkg" in run.output
    assert ssh(HOST, "dpkg-query -W -f='${db:Status-Abbrev}' aws-neuronx-tools").stdout.startswith("ii")


def _base_models(tmp_path):
    models = tmp_path / "models"
    if not models.exists():
        shutil.copytree(SAMPLES, models)
    return tmp_path, models


def test_a_read_only_state_dir_is_one_line_naming_the_path(sandbox, tmp_path):
    ssh(HOST, "mkdir -p /var/lib/tritonfleet && mount -t tmpfs -o ro tmpfs /var/lib/tritonfleet")
    try:
        run = _run(*_base_models(tmp_path))
        assert run.returncode != 0
        line = next(x for x in run.output.splitlines() if "ERROR: /var/lib/tritonfleet" in x)
        assert f"[{HOST}]" in line and "is not writable or is full on this host" in line
        assert "Traceback" not in run.output
    finally:
        ssh(HOST, "umount /var/lib/tritonfleet")


def test_local_users_cannot_read_the_secret_from_tritons_command_line(repo):
    """Triton takes the repository secret as an argument; /proc is mounted hidepid, so only root sees it."""
    base, models = repo
    assert _run(base, models).returncode == 0
    _check_add_sub(host_ip(HOST), 8000, 8001)  # serving: tritonserver runs with the secret in its arguments
    secret = fleet.load_state()["repository_secret"]
    ssh(HOST, "id tfuser >/dev/null 2>&1 || useradd -M -s /bin/sh tfuser")
    every_cmdline = "for f in /proc/[0-9]*/cmdline; do cat $f; echo; done 2>/dev/null; true"
    assert secret in ssh(HOST, every_cmdline).stdout  # root sees it: the check can fail
    as_user = ssh(HOST, f"su -s /bin/sh tfuser -c {shlex.quote(every_cmdline)}").stdout
    assert "tritonserver" not in as_user and secret not in as_user
