"""Issue 4 acceptance: deploys/serve.py takes a bare host to a serving Triton."""

from __future__ import annotations

import json
import shutil

import pytest
import tritonclient.http as httpclient

from tests.e2e.helpers import COPY_MODE, ROOT, assert_noop, host_ip, pyinfra, ssh, write_inventory
from tests.e2e.test_01_sandbox import _check_add_sub
from tritonfleet.sandbox import fleet


def _containers(name: str) -> list[dict]:
    ids = ssh(name, "docker ps -aq --filter label=com.tritonfleet.role=triton").stdout.split()
    return json.loads(ssh(name, "docker inspect " + " ".join(ids)).stdout) if ids else []


def _neuron_nodes(name: str, container: str | None = None) -> set[str]:
    """Neuron entries in /dev as the host (or one of its containers, through `docker exec`) sees them."""
    ls = f"docker exec {container} ls -A /dev" if container else "ls -A /dev"
    return {e for e in ssh(name, ls).stdout.split() if e.startswith("neuron")}


def _env(c: dict) -> dict:
    return dict(e.split("=", 1) for e in c["Config"]["Env"])


@pytest.fixture(scope="module")
def served(sandbox, tmp_path_factory):
    fleet.reset_host("scratch")  # a bare host
    inv = write_inventory(tmp_path_factory.mktemp("serve"), ["scratch"])
    first = pyinfra(inv, "deploys/serve.py")
    assert first.returncode == 0, first.output[-5000:]
    (c,) = _containers("scratch")
    second = pyinfra(inv, "deploys/serve.py")
    return first, second, c


def test_container_has_exactly_its_device_and_limits(served):
    _, _, c = served
    hc = c["HostConfig"]
    assert [d["PathOnHost"] for d in hc["Devices"]] == ["/dev/neuron0"]
    assert {"Name": "memlock", "Hard": -1, "Soft": -1} in hc["Ulimits"]
    assert {"Name": "stack", "Hard": 67108864, "Soft": 67108864} in hc["Ulimits"]
    assert hc["ShmSize"] == 1024**3
    assert hc["Privileged"] is False and hc["NetworkMode"] != "host"
    assert hc["RestartPolicy"]["Name"] == "unless-stopped"
    env = _env(c)
    assert env["NEURON_RT_VISIBLE_CORES"] == "0-1" and env["NEURON_RT_LOG_LEVEL"] == "ERROR"
    mounts = {m["Destination"]: m for m in c["Mounts"]}
    assert mounts["/models"]["RW"] is False and mounts["/mylib/udev"]["RW"] is False
    args = c["Args"]
    assert "--model-control-mode=explicit" in args and "--model-repository=/models/current" in args
    restricted = "model-repository,logging,trace,shared-memory:x-tritonfleet-repository-key="
    assert any(a.startswith("--http-restricted-api=" + restricted) for a in args)
    assert any(a.startswith("--grpc-restricted-protocol=" + restricted) for a in args)


def test_container_sees_only_its_own_device_node(served):
    _, _, c = served
    assert _neuron_nodes("scratch") == {"neuron0"}
    assert _neuron_nodes("scratch", c["Id"]) == {"neuron0"}


def test_inference_over_http_and_grpc(served):
    _check_add_sub(host_ip("scratch"), 8000, 8001)


def test_second_run_changes_nothing_and_keeps_the_container(served):
    _, second, before = served
    assert_noop(second)
    (after,) = _containers("scratch")
    assert after["Id"] == before["Id"]
    assert after["State"]["StartedAt"] == before["State"]["StartedAt"]


def test_model_repository_api_needs_the_secret_header(served):
    import tritonclient.grpc as grpcclient

    secret = fleet.load_state()["repository_secret"]
    client = httpclient.InferenceServerClient(f"{host_ip('scratch')}:8000")
    with pytest.raises(Exception, match="403|restricted"):
        client.load_model("add_sub")
    with pytest.raises(Exception, match="403|restricted"):
        client.load_model("add_sub", headers={"x-tritonfleet-repository-key": "wrong-" + secret})
    client.load_model("add_sub", headers={"x-tritonfleet-repository-key": secret})
    assert client.is_model_ready("add_sub")
    grpc = grpcclient.InferenceServerClient(f"{host_ip('scratch')}:8001")
    with pytest.raises(Exception, match="(?i)restricted|permission|unavailable"):
        grpc.load_model("add_sub")
    # Triton names the gRPC metadata key "triton-grpc-protocol-<header>" (metadata keys are lowercase)
    grpc.load_model("add_sub", headers={"triton-grpc-protocol-x-tritonfleet-repository-key": secret})
    assert grpc.is_model_ready("add_sub")


def test_status_table_shows_the_server(served, capsys):
    from tritonfleet.face.status import fleet_status

    rows = [r for r in fleet_status(ROOT / "inventories/sandbox.py") if r["host"] == "scratch"]
    assert len(rows) == 1 and "error" not in rows[0]
    row = rows[0]
    assert row["devices"] == "neuron0" and row["cores"] == "0-1" and row["state"] == "running"
    assert row["ready_models"] == "add_sub" and row["endpoint"] == f"http://{host_ip('scratch')}:8000"


def test_compatibility_gate_refuses_an_old_host_driver(sandbox, tmp_path):
    # The data claims an image runtime that the old driver could run; the image's own label
    # (runtime-lib 2.34.10.0 needs driver >= 2.30.2.0) is what the gate believes.
    inv = write_inventory(tmp_path, ["inf2"], extra={"neuron_dkms_version": "2.26.10.0*",
                                                      "triton_neuron_runtime_version": "2.30.50.0"})
    run = pyinfra(inv, "deploys/serve.py")
    assert run.returncode != 0
    assert "needs host driver" in run.output and "upgrade the host driver" in run.output
    assert _containers("inf2") == []
    assert ssh("inf2", "dpkg-query -W -f='${Version}' aws-neuronx-dkms").stdout == "2.26.10.0"


def test_an_image_whose_runtime_is_too_old_for_the_host_driver_is_refused_before_the_swap(sandbox, tmp_path):
    """Issue 26: driver 2.29 needs runtime-lib 2.33 or later. The data declares 2.33, but the image's own label
    says 2.28.19.0 (an image built for an older SDK): the gate believes the label and starts nothing."""
    base, image = "tritonfleet-sandbox/tritonserver:2.51.0-sandbox", "tritonfleet-e2e/old-runtime:2.28"
    ssh("inf2", f"docker image inspect {base} >/dev/null 2>&1 || "
                "docker load -q -i /srv/images/tritonserver-2.51.0-sandbox.tar >/dev/null; "
                f"printf 'FROM {base}\\nLABEL com.tritonfleet.neuron.runtime-lib=2.28.19.0\\n' "
                f"| docker build -q -t {image} - >/dev/null && docker save -o /var/tmp/old-runtime.tar {image}")
    inv = write_inventory(tmp_path, ["inf2"], extra={
        "neuron_dkms_version": "2.29.8.0*", "triton_neuron_runtime_version": "2.33", "triton_image_source": "archive",
        "triton_image": image, "triton_image_archive": "/var/tmp/old-runtime.tar"})
    try:
        run = pyinfra(inv, "deploys/serve.py")
    finally:
        ssh("inf2", f"rm -f /var/tmp/old-runtime.tar; docker rmi -f {image} >/dev/null 2>&1 || true")
    assert run.returncode != 0
    assert ("host inf2: aws-neuronx-dkms 2.29.8.0 needs aws-neuronx-runtime-lib >= 2.33 (Neuron SDK 2.31.0 known "
            "issue); the image has 2.28.19.0: rebuild the image for Neuron SDK 2.31.0 or later (neuron_sdk_release), "
            "or keep the host on an older driver") in run.output, run.output[-3000:]
    assert _containers("inf2") == []


def test_changed_spec_recreates_the_container_and_keeps_the_previous_spec(served, tmp_path):
    _, _, before = served
    inv = write_inventory(tmp_path, ["scratch"], extra={"triton_shm_size": "2g"})
    run = pyinfra(inv, "deploys/serve.py")
    assert run.returncode == 0, run.output[-4000:]
    (after,) = _containers("scratch")
    assert after["Id"] != before["Id"] and after["HostConfig"]["ShmSize"] == 2 * 1024**3
    record = json.loads(ssh("scratch", "cat /var/lib/tritonfleet/servers/triton.json").stdout)
    assert ssh("scratch", "stat -c %a /var/lib/tritonfleet/servers/triton.json").stdout.strip() == "600"
    assert fleet.load_state()["repository_secret"] not in json.dumps(record)
    assert record["spec"] == after["Config"]["Labels"]["com.tritonfleet.spec"]
    assert record["previous"]["spec"] == before["Config"]["Labels"]["com.tritonfleet.spec"]
    assert "2g" not in record["previous"]["run_args"]
    _check_add_sub(host_ip("scratch"), 8000, 8001)


def test_health_gate_failure_shows_reason_and_logs(served, tmp_path):
    inv = write_inventory(tmp_path, ["scratch"], extra={"triton_models": ["no_such_model"],
                                                        "triton_health_timeout": 20,
                                                        "qa_suites": None})  # preflight: no server for add_sub's
    run = pyinfra(inv, "deploys/serve.py")
    assert run.returncode != 0
    assert "Triton server triton is not running" in run.output and "first error lines of its log" in run.output
    # a line only Triton itself writes (the container's log), not our own message
    assert "no_such_model" in run.output.split("first error lines of its log:", 1)[1]
    assert "rolled back to the previous container" in run.output and "which serves again" in run.output
    _check_add_sub(host_ip("scratch"), 8000, 8001)


def test_a_controller_copy_onto_a_host_serving_from_s3_is_refused_and_it_serves_on(served, tmp_path):
    """A serving host switched from models_s3_uri to models_source: preflight refuses it in one line (the copy
    would take the S3 sync's `current` away from the servers while the new one starts), nothing changes."""
    models = tmp_path / "models"
    shutil.copytree(fleet.SAMPLES / "add_sub", models / "add_sub")
    def started() -> list[tuple[str, str]]:  # (not the whole inspect: docker lists mounts in no fixed order)
        return [(c["Id"], c["State"]["StartedAt"]) for c in _containers("scratch")]

    before = started()
    inv = write_inventory(tmp_path, ["scratch"], extra={"models_source": str(models), **COPY_MODE})
    run = pyinfra(inv, "deploys/serve.py")
    assert run.returncode != 0 and "preflight failed, nothing was changed" in run.output, run.output[-3000:]
    assert "/opt/tritonfleet/models on the host is an S3 sync" in run.output and "Starting operation" not in run.output
    assert started() == before
    _check_add_sub(host_ip("scratch"), 8000, 8001)


def test_ecr_image_is_pulled_through_the_instance_profile_helper(sandbox, tmp_path):
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/triton-neuron:2.51"
    inv = write_inventory(tmp_path, ["inf2"], extra={"triton_image_source": "pull", "triton_image": image})
    run = pyinfra(inv, "deploys/serve.py")
    # The sandbox has no route to ECR, so the pull fails; what matters is how docker authenticates.
    assert run.returncode != 0 and "123456789012.dkr.ecr.us-east-1.amazonaws.com" in run.output
    assert ssh("inf2", "dpkg-query -W -f='${Status}' amazon-ecr-credential-helper").stdout.startswith("install ok")
    config = json.loads(ssh("inf2", "cat /root/.docker/config.json").stdout)
    assert config == {"credHelpers": {"123456789012.dkr.ecr.us-east-1.amazonaws.com": "ecr-login"}}
    assert _containers("inf2") == []
    # Spy at the boundary: docker must ask the helper for this registry's credentials.
    helper = "/usr/bin/docker-credential-ecr-login"
    ssh("inf2", f"mv {helper} {helper}.real && printf '#!/bin/sh\\necho \"$@ $(cat)\" >> /var/tmp/ecr-helper.log\\n"
                f"exit 1\\n' > {helper} && chmod 755 {helper}")
    try:
        pyinfra(inv, "deploys/serve.py")
        log = ssh("inf2", "cat /var/tmp/ecr-helper.log", check=False).stdout
        assert "get" in log and "123456789012.dkr.ecr.us-east-1.amazonaws.com" in log
    finally:
        ssh("inf2", f"mv {helper}.real {helper}; rm -f /var/tmp/ecr-helper.log")
