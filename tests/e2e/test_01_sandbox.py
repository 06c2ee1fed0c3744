"""Issue 2 acceptance: the sandbox fleet itself (SSH, isolation, simulated hardware, Docker, S3)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import numpy as np
import pytest

from tests.e2e.conftest import SECOND_WORKER_HOSTS, first_worker_hosts
from tests.e2e.helpers import ROOT, host_ip, path_exists, pyinfra, ssh, write_inventory
from tritonfleet import catalog
from tritonfleet.sandbox import fleet, layout

SANDBOX_IMAGE = "tritonfleet-sandbox/tritonserver:2.51.0-sandbox"


def _answered(run, name: str) -> bool:
    return re.search(rf"\[{name}\]\s+{name}\s*$", run.output, re.M) is not None


def test_pyinfra_exec_reaches_every_host(sandbox):
    # but the second fleet worker's, which may be mid-reset now (its own tests reach them over SSH)
    skip = [a for name in SECOND_WORKER_HOSTS for a in ("--exclude", name)]
    run = pyinfra(ROOT / "inventories/sandbox.py", *skip, "exec", "--", "hostname")
    assert run.returncode == 0, run.output
    for name in first_worker_hosts(sandbox):
        assert _answered(run, name), f"no hostname from {name}"


def test_a_host_whose_console_gets_much_output_still_answers(sandbox):
    """PID 1 and its units write to /dev/console (start jobs' status while a boot is slow): the console is read, into
    the host's console log, so such a write never blocks and the host keeps answering SSH and systemctl."""
    log = layout.logs_dir() / "inf1.console.log"
    before = log.stat().st_size if log.exists() else 0
    marker = f"tritonfleet-console-{time.time_ns()}"
    # 1 MiB: many times a pseudo-TTY's buffer, which a console nobody reads fills and then blocks on
    wrote = ssh("inf1", f"timeout 30 sh -c 'yes x | head -c 1048576 > /dev/console; "
                f"echo {marker} > /dev/console'; echo rc=$?", timeout=90).stdout
    assert "rc=0" in wrote, f"the console write blocked: {wrote}"
    assert ssh("inf1", "systemctl is-system-running", check=False, timeout=60).stdout.strip() in {"running", "degraded"}
    deadline = time.monotonic() + 20
    while marker.encode() not in log.read_bytes()[before:] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert marker.encode() in log.read_bytes()[before:], "the console's output is not in the host's console log"
    assert log.stat().st_size - before >= 1 << 20


def test_strict_host_keys_refuse_a_host_missing_from_known_hosts(sandbox, tmp_path):
    """The sandbox inventory's policy (``ssh_strict_host_key_checking: yes``) refuses an unknown host.

    pyinfra's own default, ``accept-new``, would connect and append the key: with an empty known_hosts
    file this test tells the two policies apart (a *changed* key is refused by both)."""
    name = "inf2"
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    inv = write_inventory(tmp_path, [name], extra={"ssh_known_hosts_file": str(known_hosts)})
    run = pyinfra(inv, "exec", "--", "hostname")
    assert run.returncode != 0, run.output
    assert not _answered(run, name), run.output
    # pyinfra 3.10's StrictPolicy (pyinfra/connectors/sshuserclient/client.py), surfaced by
    # SSHConnector.connect as "SSH error (...)"
    reason = f"SSH error (StrictPolicy: No host key for {host_ip(name)} found in known_hosts)"
    assert reason in run.output, run.output
    assert known_hosts.read_text() == "", "the host key was accepted into known_hosts"


def test_strict_host_keys_refuse_a_changed_key(sandbox, tmp_path):
    # Refused under every policy, accept-new included; the test above is the one that needs "yes".
    bad = tmp_path / "known_hosts"
    other = sorted(sandbox)[0], sorted(sandbox)[1]
    line = next(x for x in fleet.known_hosts_path().read_text().splitlines() if x.startswith(host_ip(other[1]) + " "))
    bad.write_text(f"{host_ip(other[0])} {line.split(' ', 1)[1]}\n")
    inv = write_inventory(tmp_path, [other[0]], extra={"ssh_known_hosts_file": str(bad)})
    run = pyinfra(inv, "exec", "--", "hostname")
    assert run.returncode != 0
    assert not _answered(run, other[0])
    assert f"Host key for {host_ip(other[0])} does not match" in run.output, run.output


def _machine_has(pkg: str) -> bool:
    return subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True).stdout.startswith(
        "install ok installed")


def _packages(name: str) -> str:
    return ssh(name, "dpkg-query -W -f='${Package} ${Version} ${Status}\\n' | sort").stdout


def test_isolation_install_in_one_host_changes_nothing_else(sandbox, fresh):
    fresh("scratch")
    others = [n for n in sandbox if n != "scratch"][:3]
    before = {n: _packages(n) for n in others}
    machine_before = _machine_has("tini")
    assert "tini" not in _packages("scratch")
    ssh("scratch", "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q tini && "
                   "touch /only-in-scratch")
    assert ssh("scratch", "dpkg-query -W -f='${Status}' tini").stdout.startswith("install ok installed")
    for n in others:
        assert _packages(n) == before[n], f"{n} changed"
        assert not path_exists(n, "/only-in-scratch")
    assert _machine_has("tini") == machine_before
    assert not os.path.exists("/only-in-scratch")


def _neuron_repo_setup(name: str) -> str:
    """Point a host at the sandbox Neuron repo by hand (what the neuron role does, minus the checks)."""
    state = fleet.load_state()
    neuron = state["supplies"]["repos"]["neuron"]
    base = f"http://{fleet.BRIDGE_IP}:{fleet.REPO_PORT}/{neuron['url_path']}"
    return (f"mkdir -p /etc/apt/keyrings && curl -fsS {base}/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB | gpg --dearmor "
            f"> /etc/apt/keyrings/neuron.gpg && echo 'deb [signed-by=/etc/apt/keyrings/neuron.gpg] {base} "
            f"bookworm main' > /etc/apt/sources.list.d/neuron.list && apt-get update -q")


def test_hardware_simulation_devices_appear_with_the_driver(sandbox, fresh):
    name = "trn1"
    expected = catalog.get("trn1.32xlarge")  # tests/e2e/conftest.py
    count = "ls /dev | grep -c -E '^neuron[0-9]+$' || test $? = 1"  # grep: 1 = no match, >1 = error
    if ssh(name, count).stdout.strip() != "0":  # a fleet reused from an earlier session may have a driver
        fresh(name)
    try:
        assert ssh(name, count).stdout.strip() == "0"
        ssh(name, _neuron_repo_setup(name) + " && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                  "linux-headers-$(uname -r) aws-neuronx-dkms=2.30.2.0 aws-neuronx-tools")
        devices = ssh(name, "ls /dev | grep -E '^neuron[0-9]+$'").stdout.split()
        assert sorted(devices) == sorted(f"neuron{i}" for i in range(expected.device_count))
        assert ssh(name, "stat -c %t /dev/neuron0").stdout.strip() == "fa"  # major 250
        listed = json.loads(ssh(name, "/opt/aws/neuron/bin/neuron-ls -j").stdout)
        assert len(listed) == expected.device_count
        for i, dev in enumerate(sorted(listed, key=lambda d: d["neuron_device"])):
            assert set(dev) >= {"neuron_device", "bdf", "cpu_affinity", "numa_node", "connected_to", "nc_count",
                                "memory_size", "neuroncore_ids", "neuron_processes"}
            assert dev["nc_count"] == expected.cores_per_device
            assert dev["neuroncore_ids"] == list(expected.cores_of_device(i))
            assert dev["memory_size"] == expected.device_memory_mib * 1024 * 1024
    finally:
        fresh(name)


def test_docker_with_production_flags_serves_add_sub(sandbox, fresh):
    fresh("scratch")
    ssh("scratch", _neuron_repo_setup("scratch") + " && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                   "docker.io linux-headers-$(uname -r) aws-neuronx-dkms && systemctl is-active docker")
    ssh("scratch", "docker load -q -i /srv/images/tritonserver-2.51.0-sandbox.tar && mkdir -p /opt/models")
    tar = subprocess.run(["tar", "-C", str(fleet.SAMPLES), "-cf", "-", "add_sub"], capture_output=True, check=True)
    subprocess.run(fleet.ssh_base_args(fleet.get_host("scratch")) + ["tar -C /opt/models -xf -"], input=tar.stdout,
                   check=True)
    ssh("scratch", "docker run -d --name tri --device /dev/neuron0 --ulimit memlock=-1 --ulimit stack=67108864 "
                   "--shm-size=1g -p 8000:8000 -p 8001:8001 -p 8002:8002 -v /opt/models:/models "
                   f"{SANDBOX_IMAGE} tritonserver --model-repository=/models")
    inspect = json.loads(ssh("scratch", "docker inspect tri").stdout)[0]["HostConfig"]
    assert {"Name": "memlock", "Hard": -1, "Soft": -1} in inspect["Ulimits"]
    assert [d["PathOnHost"] for d in inspect["Devices"]] == ["/dev/neuron0"]
    _check_add_sub(host_ip("scratch"), 8000, 8001)


def _check_add_sub(ip: str, http_port: int, grpc_port: int, timeout: float = 90) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    http = httpclient.InferenceServerClient(f"{ip}:{http_port}")
    deadline = time.monotonic() + timeout
    while True:
        try:
            if http.is_server_ready() and http.is_model_ready("add_sub"):
                break
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"Triton at {ip}:{http_port} not ready after {timeout}s")
        time.sleep(0.5)
    rng = np.random.default_rng()
    a, b = rng.random((1, 4), dtype=np.float32), rng.random((1, 4), dtype=np.float32)
    for mod, client in ((httpclient, http), (grpcclient, grpcclient.InferenceServerClient(f"{ip}:{grpc_port}"))):
        i0, i1 = mod.InferInput("INPUT0", a.shape, "FP32"), mod.InferInput("INPUT1", b.shape, "FP32")
        i0.set_data_from_numpy(a)
        i1.set_data_from_numpy(b)
        res = client.infer("add_sub", [i0, i1])
        np.testing.assert_allclose(res.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        np.testing.assert_allclose(res.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


def test_s3_endpoint_reachable_from_a_host_with_the_sample_repository(sandbox):
    import boto3

    out = ssh("inf2", f"curl -fsS '{fleet.s3_endpoint()}/{fleet.S3_BUCKET}?list-type=2&prefix={fleet.S3_PREFIX}'").stdout
    for key in ("add_sub/config.pbtxt", "add_sub/1/model.py"):
        assert f"<Key>{fleet.S3_PREFIX}{key}</Key>" in out
    s3 = boto3.client("s3", endpoint_url=fleet.s3_endpoint(), region_name=fleet.S3_REGION,
                      aws_access_key_id="x", aws_secret_access_key="x")
    body = s3.get_object(Bucket=fleet.S3_BUCKET, Key=fleet.S3_PREFIX + "add_sub/config.pbtxt")["Body"].read()
    assert body == (fleet.SAMPLES / "add_sub/config.pbtxt").read_bytes()


def test_imds_answers_each_host_its_own_type(sandbox):
    for name in ("inf1", "gpu"):
        got = ssh(name, f"curl -fsS http://{fleet.BRIDGE_IP}:{fleet.IMDS_PORT}/latest/meta-data/instance-type").stdout
        assert got.strip() == fleet.get_host(name).instance_type


def test_up_is_idempotent(sandbox):
    from tests.e2e.conftest import FLEET

    def launchers() -> dict[str, int | None]:  # the second fleet worker may reset its hosts meanwhile
        return {h.name: h.nspawn_pid for h in fleet.hosts_from_state(fleet.load_state())
                if h.name not in SECOND_WORKER_HOSTS}

    before = launchers()
    fleet.up(FLEET)
    after = launchers()
    assert before == after and "scratch" in after
