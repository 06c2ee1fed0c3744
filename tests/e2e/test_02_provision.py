"""Issue 3 acceptance: host provisioning (deploys/neuron.py) on sandbox hosts of every family."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.e2e.helpers import (
    ROOT,
    assert_noop,
    dpkg_version,
    path_exists,
    pyinfra,
    service_active,
    ssh,
    write_inventory,
)
from tritonfleet import catalog
from tritonfleet.sandbox import fleet

HOSTS = ["inf1", "inf2", "trn1", "gpu", "legacy"]


@pytest.fixture(scope="module")
def provisioned(sandbox, tmp_path_factory):
    fleet.reset_hosts(HOSTS)  # bare hosts (the legacy one comes back with its legacy packages)
    inv = write_inventory(tmp_path_factory.mktemp("inv"), HOSTS)
    first = pyinfra(inv, "deploys/neuron.py")
    second = pyinfra(inv, "deploys/neuron.py")
    return first, second


def test_deploy_completes_and_second_run_changes_nothing(provisioned):
    first, second = provisioned
    assert first.returncode == 0, first.output[-4000:]
    assert first.totals["changed"] > 0 and first.totals["errors"] == 0
    assert_noop(second)


def test_driver_lines_per_family(provisioned):
    assert dpkg_version("inf1", "aws-neuronx-dkms").startswith("2.24.")
    assert dpkg_version("legacy", "aws-neuronx-dkms").startswith("2.24.")
    for name in ("inf2", "trn1"):
        assert dpkg_version(name, "aws-neuronx-dkms") == "2.30.2.0"  # Neuron 2.32 release table
        assert dpkg_version(name, "aws-neuronx-tools") == "2.32.28.0"
    assert dpkg_version("gpu", "aws-neuronx-dkms") is None


def test_legacy_packages_removed(provisioned):
    for pkg in ("aws-neuron-dkms", "aws-neuron-runtime"):
        assert dpkg_version("legacy", pkg) is None
    assert not service_active("legacy", "neuron-rtd")


@pytest.mark.parametrize("name", ["inf1", "inf2", "trn1", "legacy"])
def test_devices_match_catalog_and_neuron_ls_parses(provisioned, name):
    itype = catalog.get(fleet.get_host(name).instance_type)
    devices = ssh(name, "ls /dev | grep -E '^neuron[0-9]+$' || true").stdout.split()
    assert len(devices) == itype.device_count
    listed = json.loads(ssh(name, "bash -lc 'neuron-ls -j'").stdout)  # PATH from /etc/profile.d/neuron.sh
    assert len(listed) == itype.device_count
    assert all(d["nc_count"] == itype.cores_per_device for d in listed)


def test_efa_only_where_the_instance_has_it(provisioned):
    assert ssh("trn1", "test -x /opt/amazon/efa/bin/fi_info", check=False).returncode == 0
    assert not path_exists("inf2", "/opt/amazon/efa")


def test_gpu_host_driver_toolkit_and_docker_runtime(provisioned):
    assert "NVIDIA A10G" in ssh("gpu", "nvidia-smi -L").stdout
    daemon = json.loads(ssh("gpu", "cat /etc/docker/daemon.json").stdout)
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert "nvidia" in ssh("gpu", "docker info --format '{{json .Runtimes}}'").stdout


def test_docker_daemon_config(provisioned):
    daemon = json.loads(ssh("inf2", "cat /etc/docker/daemon.json").stdout)
    assert daemon["default-ulimits"]["memlock"] == {"Name": "memlock", "Soft": -1, "Hard": -1}
    assert daemon["default-ulimits"]["stack"]["Hard"] == 67108864
    assert daemon["live-restore"] is True and daemon["log-opts"]["max-file"] == "5"
    assert ssh("inf2", "systemctl is-active docker").stdout.strip() == "active"
    assert "unlimited" in ssh("inf2", "cat /etc/security/limits.d/90-tritonfleet-memlock.conf").stdout


HARDWARE = "/etc/tritonfleet-sandbox/hardware.json"
DKMS_HOOK = "/etc/kernel/header_postinst.d/aws-neuronx-dkms-sandbox"


def _dkms_build_fails(name: str, why: str | None) -> None:
    """Play (or stop playing) a kernel the host's driver does not build on, and rebuild as a kernel upgrade does."""
    hw = json.loads(ssh(name, f"cat {HARDWARE}").stdout)
    hw.pop("dkms_build_fails", None)
    if why:
        hw["dkms_build_fails"] = why
    ssh(name, f"cat > {HARDWARE}", input=json.dumps(hw))
    ssh(name, f"{DKMS_HOOK} \"$(uname -r)\"")


def test_a_kernel_the_driver_is_not_built_for_is_reported_with_the_fix_and_refused(provisioned, tmp_path):
    """Issue 26: after a kernel change DKMS did not build the installed driver for (the stand-in DKMS plays the
    build failure), `tritonfleet compat` reports the kernel -> driver link failed with its fix, and a deploy
    refuses the host in preflight, before anything changes; once the module builds again both pass."""
    name, kernel = "trn1", os.uname().release
    inv = write_inventory(tmp_path, [name])
    compat = [str(ROOT / ".venv/bin/tritonfleet"), "compat", "--inventory", str(inv), "--json"]
    _dkms_build_fails(name, "e2e: a kernel this driver does not build on")
    try:
        assert ssh(name, "ls /dev | grep -c -E '^neuron[0-9]+$' || true").stdout.strip() == "0"
        out = subprocess.run(compat, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 1, out.stdout + out.stderr
        (found,) = [f for f in json.loads(out.stdout)["findings"] if f["link"] == "kernel→driver"]
        assert found["verdict"] == "fail" and found["host"] == name and name in found["subject"]
        assert found["line"] == f"aws-neuronx-dkms 2.30.2.0 is not built for kernel {kernel}"
        assert found["fix"] == "install the kernel headers (linux-headers-$(uname -r)) and reinstall aws-neuronx-dkms"
        before = ssh(name, "ls -l --time-style=+%s /etc/apt/sources.list.d /etc/docker").stdout
        run = pyinfra(inv, "deploys/serve.py")
        assert run.returncode != 0
        assert "preflight failed, nothing was changed" in run.output, run.output[-3000:]
        assert f"is not built for kernel {kernel}" in run.output and "reinstall aws-neuronx-dkms" in run.output
        assert "Starting operation" not in run.output
        assert ssh(name, "ls -l --time-style=+%s /etc/apt/sources.list.d /etc/docker").stdout == before
    finally:
        _dkms_build_fails(name, None)
    out = subprocess.run(compat, cwd=ROOT, capture_output=True, text=True, timeout=120)
    (found,) = [f for f in json.loads(out.stdout)["findings"] if f["link"] == "kernel→driver"]
    assert found["verdict"] == "ok", found


def test_wrong_key_fingerprint_fails_before_anything_is_installed(sandbox, fresh, tmp_path):
    fresh("scratch")
    wrong = "0123456789ABCDEF0123456789ABCDEF01234567"
    inv = write_inventory(tmp_path, ["scratch"], extra={"neuron_key_fingerprint": wrong})
    run = pyinfra(inv, "deploys/neuron.py")
    assert run.returncode != 0
    assert "key fingerprint mismatch" in run.output and wrong in run.output
    known = ssh("scratch", "dpkg-query -W -f='${Package}\\n'").stdout.split()
    assert known and not [p for p in known if "neuron" in p or "docker" in p]
    assert not path_exists("scratch", "/etc/apt/keyrings/neuron.gpg")
    assert not path_exists("scratch", "/etc/apt/sources.list.d/neuron.list")


def test_missing_devices_fail_with_reason_and_fix(sandbox, tmp_path):
    inv = write_inventory(tmp_path, ["nodrv"])
    run = pyinfra(inv, "deploys/neuron.py")
    assert run.returncode != 0
    kernel = os.uname().release
    assert (f"inf2.xlarge should have 1 Neuron devices, found 0: the neuron driver is not loaded; "
            f"is linux-headers-{kernel} installed?") in run.output
