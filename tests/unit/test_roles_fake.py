"""@fake-connector tests of the Neuron role's command paths on Ubuntu 22.04/24.04 (apt) and AL2023 (dnf)."""

from __future__ import annotations

import pytest

from roles.neuron import neuron
from tests.unit.fakehost import run_role

FPR = "0123456789ABCDEF0123456789ABCDEF01234567"
DATA = {"neuron_key_fingerprint": FPR, "triton_repository_secret": "s" * 24}


def _joined(rec) -> str:
    return "\n".join(rec.commands)


@pytest.mark.parametrize("os_key,codename", [("ubuntu2204", "jammy"), ("ubuntu2404", "noble")])
def test_apt_path_inf2(monkeypatch, os_key, codename):
    rec = run_role(neuron, {**DATA, "instance_type": "inf2.xlarge"}, os_key, monkeypatch, devices=1)
    assert rec.failures == []
    cmds = _joined(rec)
    # key fetched and checked against the expected fingerprint before anything else is installed
    key_cmd = next(c for c in rec.commands if "GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB" in c)
    assert FPR in key_cmd and "/etc/apt/keyrings/neuron.gpg" in key_cmd
    repo_line = f"deb [signed-by=/etc/apt/keyrings/neuron.gpg] https://apt.repos.neuron.amazonaws.com {codename} main"
    assert repo_line in cmds + "\n".join(rec.uploads.values())
    assert "apt-get update" in cmds
    assert "linux-headers-6.8.0-1015-aws" in cmds
    assert "aws-neuronx-dkms=2.30.2.0*" in cmds and "aws-neuronx-tools=2.32.28.0*" in cmds
    assert "aws-neuronx-dkms=2.24" not in cmds
    assert "apt-key" not in cmds
    order = [i for i, c in enumerate(rec.commands) if "GPG-PUB-KEY" in c or "aws-neuronx-dkms=" in c]
    assert "GPG-PUB-KEY" in rec.commands[order[0]], "the key check must come before the driver install"
    assert rec.uploads.get("/etc/profile.d/neuron.sh", "").count("/opt/aws/neuron/bin") >= 1


def test_apt_path_inf1_pins_dkms_224(monkeypatch):
    rec = run_role(neuron, {**DATA, "instance_type": "inf1.6xlarge"}, "ubuntu2204", monkeypatch)
    cmds = _joined(rec)
    assert "aws-neuronx-dkms=2.24.*" in cmds
    assert "aws-neuronx-dkms=2.30" not in cmds


def test_apt_removes_legacy_packages(monkeypatch):
    installed = "ii  aws-neuron-dkms  1.5.0.0  amd64  legacy\nii  aws-neuron-runtime  1.6.24.0  amd64  legacy"
    rec = run_role(neuron, {**DATA, "instance_type": "inf1.xlarge"}, "ubuntu2204", monkeypatch, installed=installed)
    removal = next(c for c in rec.commands if "remove" in c and "aws-neuron-dkms" in c)
    assert "aws-neuron-runtime" in removal


@pytest.mark.parametrize("itype,pin", [("inf2.xlarge", "aws-neuronx-dkms-2.30.2.0*"), ("inf1.2xlarge", "aws-neuronx-dkms-2.24.*")])
def test_dnf_path_al2023(monkeypatch, itype, pin):
    rec = run_role(neuron, {**DATA, "instance_type": itype}, "al2023", monkeypatch,
                   kernel="6.1.115-126.197.amzn2023.x86_64", devices=1)
    assert rec.failures == []
    cmds = _joined(rec)
    assert "dnf install" in cmds and pin in cmds
    assert "kernel-devel-6.1.115-126.197.amzn2023.x86_64" in cmds
    key_cmd = next(c for c in rec.commands if "GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB" in c)
    assert "--dearmor" not in key_cmd and "/etc/pki/rpm-gpg/RPM-GPG-KEY-AMAZON-AWS-NEURON" in key_cmd
    repo = rec.uploads["/etc/yum.repos.d/neuron.repo"]
    assert "baseurl=https://yum.repos.neuron.amazonaws.com" in repo and "gpgcheck=1" in repo
    assert "apt-get install" not in cmds and "apt-get update" not in cmds


def test_non_neuron_host_does_nothing(monkeypatch):
    rec = run_role(neuron, {**DATA, "instance_type": "g5.xlarge", "nvidia_key_fingerprint": FPR}, "ubuntu2204",
                   monkeypatch)
    assert not any("neuron" in c for c in rec.commands if "command -v" not in c and "-release" not in c)


def test_device_check_reports_missing_devices(monkeypatch):
    rec = run_role(neuron, {**DATA, "instance_type": "inf2.24xlarge"}, "ubuntu2204", monkeypatch, devices=4)
    assert len(rec.failures) == 1
    assert "inf2.24xlarge should have 6 Neuron devices, found 4" in rec.failures[0]


def test_nvidia_apt_path(monkeypatch):
    from roles.nvidia import nvidia

    data = {**DATA, "instance_type": "g5.12xlarge", "nvidia_key_fingerprint": FPR}
    rec = run_role(nvidia, data, "ubuntu2404", monkeypatch)
    cmds = _joined(rec)
    assert rec.uploads["/etc/apt/sources.list.d/nvidia-container-toolkit.list"] == (
        "deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.gpg] "
        "https://nvidia.github.io/libnvidia-container/stable/deb/amd64 /\n")
    assert "https://nvidia.github.io/libnvidia-container/gpgkey" in cmds and FPR in cmds
    assert "nvidia-driver-550-server" in cmds and "nvidia-container-toolkit" in cmds
    assert "nvidia-ctk runtime configure --runtime=docker" in cmds


def test_nvidia_dnf_path_leaves_the_driver_to_the_ami(monkeypatch):
    from roles.nvidia import nvidia

    data = {**DATA, "instance_type": "g5.xlarge", "nvidia_key_fingerprint": FPR}
    rec = run_role(nvidia, data, "al2023", monkeypatch)
    cmds = _joined(rec)
    assert "baseurl=https://nvidia.github.io/libnvidia-container/stable/rpm/x86_64" in \
        rec.uploads["/etc/yum.repos.d/nvidia-container-toolkit.repo"]
    assert "nvidia-driver" not in cmds and "dnf install" in cmds and "nvidia-container-toolkit" in cmds
    key_cmd = next(c for c in rec.commands if "gpgkey" in c and FPR in c)
    assert "--dearmor" not in key_cmd
    rec = run_role(nvidia, {**data, "nvidia_driver_package_dnf": "nvidia-driver-{branch}"}, "al2023", monkeypatch)
    assert "nvidia-driver-550" in _joined(rec)
