"""@fake runs of every role and of both whole deploys on every supported platform (healthy host facts;
any failed check fails the test unless the test names it)."""

from __future__ import annotations

import shlex

import pytest

from roles.base import base
from roles.docker import docker
from roles.efa import efa
from roles.models import models
from roles.neuron import neuron
from roles.nvidia import nvidia
from tests.fake.fakehost import PLATFORMS, run_deploys, uploads_and_commands

FPR = "0123456789ABCDEF0123456789ABCDEF01234567"
SECRET = "s" * 24
DATA = {"neuron_key_fingerprint": FPR, "nvidia_key_fingerprint": FPR, "efa_key_fingerprint": FPR,
        "triton_repository_secret": SECRET}
def composed(path: str) -> list:
    """The role deploys a deploy file calls, in order (deploy files only import and call roles)."""
    import ast
    import importlib
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[2] / path).read_text())
    where = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    calls = [n.value.func.id for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    assert calls[0] == "preflight", f"{path} must start with preflight()"
    return [getattr(importlib.import_module(where[c]), c) for c in calls[1:]]


NEURON_DEPLOY = composed("deploys/neuron.py")
SERVE_DEPLOY = composed("deploys/serve.py")
APT = {"ubuntu2204", "ubuntu2404", "debian12"}


def installs(rec) -> str:
    """The package script runs: family, action and specs (the script body itself left out)."""
    return "\n".join(" ".join(shlex.split(c.rsplit("packages.sh ", 1)[1])) for c in rec.commands
                     if c.startswith("sh -c") and "packages.sh" in c)


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_base(monkeypatch, os_key):
    rec = run_deploys(base, {**DATA, "instance_type": "inf2.xlarge"}, os_key, monkeypatch)
    if os_key in APT:
        assert "apt install 300 ca-certificates curl gnupg" in installs(rec)
    else:  # AL2023: curl-minimal and gnupg2-minimal provide curl and gpg
        assert "dnf install 300 ca-certificates" in installs(rec) and "curl" not in installs(rec)
    assert "memlock    unlimited" in rec.uploads["/etc/security/limits.d/90-tritonfleet-memlock.conf"]


@pytest.mark.parametrize("os_key", PLATFORMS)
@pytest.mark.parametrize("itype,dkms", [("inf2.xlarge", "2.30.2.0*"), ("inf1.6xlarge", "2.24.*")])
def test_neuron(monkeypatch, os_key, itype, dkms):
    rec = run_deploys(neuron, {**DATA, "instance_type": itype}, os_key, monkeypatch)
    text = uploads_and_commands(rec)
    key = next(c for c in rec.commands if "GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB" in c)
    assert FPR in key and "apt-key" not in text
    kernel = "6.1.115-126.197.amzn2023.x86_64" if os_key == "al2023" else "6.8.0-1015-aws"
    if os_key in APT:
        codename = {"ubuntu2204": "jammy", "ubuntu2404": "noble", "debian12": "bookworm"}[os_key]
        assert rec.uploads["/etc/apt/sources.list.d/neuron.list"] == (
            f"deb [signed-by=/etc/apt/keyrings/neuron.gpg] https://apt.repos.neuron.amazonaws.com {codename} main\n")
        assert f"apt install 300 linux-headers-{kernel}" in installs(rec)
        assert f"aws-neuronx-dkms={dkms}" in installs(rec)
        assert key.endswith("/etc/apt/keyrings/neuron.gpg " + FPR + " 0")
    else:
        repo = rec.uploads["/etc/yum.repos.d/neuron.repo"]
        assert "baseurl=https://yum.repos.neuron.amazonaws.com" in repo and "gpgcheck=1" in repo
        assert f"dnf install 300 kernel-devel-{kernel}" in installs(rec)
        assert f"aws-neuronx-dkms-{dkms}" in installs(rec)
        assert key.endswith(" 1")  # rpm keeps the key armored
    # the driver fact (preflight's kernel gate reads it) names the package too: only the key and the install count
    order = [i for i, c in enumerate(rec.commands)
             if "GPG-PUB-KEY" in c or ("aws-neuronx-dkms" in c and "packages.sh" in c)]
    assert "GPG-PUB-KEY" in rec.commands[order[0]], "the key check must come before the driver install"
    assert "/opt/aws/neuron/bin" in rec.uploads["/etc/profile.d/neuron.sh"]


def test_neuron_removes_legacy_packages(monkeypatch):
    rec = run_deploys(neuron, {**DATA, "instance_type": "inf1.xlarge"}, "ubuntu2204", monkeypatch,
                      installed={"aws-neuron-dkms": "1.5.0.0", "aws-neuron-runtime": "1.6.24.0"})
    assert "apt remove 300 aws-neuron-runtime aws-neuron-dkms" in installs(rec)


def test_neuron_device_check_reports_missing_devices(monkeypatch):
    run_deploys(neuron, {**DATA, "instance_type": "inf2.24xlarge"}, "ubuntu2204", monkeypatch, devices=4,
                expect_failures=("inf2.24xlarge should have 6 Neuron devices, found 4",))


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_non_neuron_host_gets_no_neuron_or_efa(monkeypatch, os_key):
    rec = run_deploys([neuron, efa], {**DATA, "instance_type": "g5.xlarge"}, os_key, monkeypatch)
    assert not rec.uploads and "neuron" not in installs(rec) and "efa" not in rec.text.lower().replace("-release", "")


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_efa_only_where_the_type_has_it(monkeypatch, os_key):
    rec = run_deploys(efa, {**DATA, "instance_type": "trn1.32xlarge"}, os_key, monkeypatch)
    run = [c for c in rec.commands if "efa-install.sh" in c]
    assert len(run) == 1 and run[0].endswith(FPR)
    rec = run_deploys(efa, {**DATA, "instance_type": "trn1.2xlarge"}, os_key, monkeypatch)
    assert not any("efa-install.sh" in c for c in rec.commands)


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_nvidia(monkeypatch, os_key):
    rec = run_deploys(nvidia, {**DATA, "instance_type": "g5.12xlarge"}, os_key, monkeypatch)
    assert any("https://nvidia.github.io/libnvidia-container/gpgkey" in c and FPR in c for c in rec.commands)
    assert "nvidia-ctk" not in rec.text  # the docker role's daemon.json is the one writer of the runtime entry
    if os_key in APT:
        assert rec.uploads["/etc/apt/sources.list.d/nvidia-container-toolkit.list"] == (
            "deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.gpg] "
            "https://nvidia.github.io/libnvidia-container/stable/deb/amd64 /\n")
        assert "apt install 300 nvidia-driver-550-server" in installs(rec)
        assert "apt install 300 nvidia-container-toolkit" in installs(rec)
    else:
        repo = rec.uploads["/etc/yum.repos.d/nvidia-container-toolkit.repo"]
        assert "baseurl=https://nvidia.github.io/libnvidia-container/stable/rpm/x86_64" in repo
        assert "nvidia-driver" not in installs(rec)  # AL2023 GPU DLAMIs ship the driver
        assert "dnf install 300 nvidia-container-toolkit" in installs(rec)


def test_nvidia_named_driver_and_pinned_toolkit(monkeypatch):
    data = {**DATA, "instance_type": "g5.xlarge", "nvidia_driver_package": "nvidia-driver-{branch}",
            "nvidia_driver_branch": 535, "nvidia_toolkit_version": "1.17.*"}
    rec = run_deploys(nvidia, data, "al2023", monkeypatch)
    assert "dnf install 300 nvidia-driver-535" in installs(rec)
    assert "dnf install 300 nvidia-container-toolkit-1.17.*" in installs(rec)


def test_nvidia_gpu_check_reports_missing_gpus(monkeypatch):
    run_deploys(nvidia, {**DATA, "instance_type": "g5.12xlarge"}, "ubuntu2204", monkeypatch, devices=2,
                expect_failures=("g5.12xlarge should have 4 GPUs, nvidia-smi shows 2",))


@pytest.mark.parametrize("os_key", PLATFORMS)
@pytest.mark.parametrize("itype", ["inf2.xlarge", "g5.xlarge"])
def test_docker(monkeypatch, os_key, itype):
    rec = run_deploys(docker, {**DATA, "instance_type": itype, "docker_ulimit_stack": 8388608}, os_key, monkeypatch)
    engine = "docker.io" if os_key in APT else "docker"
    assert f"install 300 {engine}" in installs(rec)
    daemon = rec.uploads["/etc/docker/daemon.json"]
    assert '"live-restore": true' in daemon and '"Soft": 8388608' in daemon
    assert ('"nvidia-container-runtime"' in daemon) == (itype == "g5.xlarge")


def test_docker_leaves_docker_ce_alone(monkeypatch):
    rec = run_deploys(docker, {**DATA, "instance_type": "inf2.xlarge"}, "ubuntu2204", monkeypatch,
                      installed={"docker-ce": "5:27.3.1-1~ubuntu.22.04~jammy"})
    assert "docker.io" not in installs(rec)


@pytest.mark.parametrize("os_key", PLATFORMS)
def test_models(monkeypatch, os_key, tmp_path):
    (tmp_path / "add_sub" / "1").mkdir(parents=True)
    (tmp_path / "add_sub" / "config.pbtxt").write_text('name: "add_sub"\n')
    (tmp_path / "add_sub" / "1" / "model.py").write_text("# model\n")
    rec = run_deploys(models, {**DATA, "instance_type": "inf2.xlarge", "models_source": str(tmp_path)}, os_key,
                      monkeypatch)
    # uploaded to the staging copy, then switched into the live repository by renames
    assert rec.uploads["/var/lib/tritonfleet/models-staging/add_sub/1/model.py"] == "# model\n"
    assert not any(p.startswith("/opt/tritonfleet/models/") for p in rec.uploads)
    switch = [c for c in rec.commands if c.startswith("sh -c") and "models-switch.sh" in c]
    assert len(switch) == 1 and switch[0].endswith(
        "/var/lib/tritonfleet/models-staging /opt/tritonfleet/models /var/lib/tritonfleet/models-previous 1")


@pytest.mark.parametrize("os_key", PLATFORMS)
@pytest.mark.parametrize("itype", ["inf2.xlarge", "trn1.32xlarge", "g5.xlarge"])
def test_whole_deploys(monkeypatch, os_key, itype):
    """Every role of deploys/serve.py (deploys/neuron.py is its first five) in order, no failed check."""
    rec = run_deploys(SERVE_DEPLOY, {**DATA, "instance_type": itype}, os_key, monkeypatch)
    runs = [c for c in rec.commands if "triton-swap.sh" in c]
    assert len(runs) == 1 and "--privileged" not in runs[0]
    assert SECRET not in "".join(rec.uploads.values())
    assert sum("efa-install.sh" in c for c in rec.commands) == (itype == "trn1.32xlarge")


def test_deploy_files_only_compose_roles():
    """Deploy files hold imports from roles/ and role calls, nothing else."""
    import ast
    import importlib
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[2] / "deploys").glob("*.py")):
        deploys = {"preflight"}
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # the docstring
            if isinstance(node, ast.ImportFrom):
                assert node.module.startswith("roles."), f"{path.name}: imports {node.module}"
                module = importlib.import_module(node.module)
                # a role module's deploys: its ROLE's own, or another @deploy it defines (qa_schedule)
                deploys |= {a.name for a in node.names if getattr(module, "ROLE", None) is not None
                            and getattr(getattr(module, a.name), "deploy_name", None) is not None} | \
                    ({"preflight"} if node.module == "roles.preflight" else set())
                continue
            assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Call), f"{path.name}: {ast.dump(node)}"
            assert node.value.func.id in deploys, f"{path.name}: calls {node.value.func.id}"


def test_sysctl_params(monkeypatch):
    from roles.sysctl import sysctl

    rec = run_deploys(sysctl, {**DATA, "instance_type": "inf2.xlarge", "sysctl_params": {"net.core.somaxconn": 4096}},
                      "ubuntu2404", monkeypatch)
    assert rec.uploads["/etc/sysctl.d/90-tritonfleet.conf"].endswith("net.core.somaxconn = 4096\n")
    assert "sysctl -q -p /etc/sysctl.d/90-tritonfleet.conf" in rec.commands
    rec = run_deploys(sysctl, {**DATA, "instance_type": "inf2.xlarge"}, "ubuntu2404", monkeypatch)
    assert not rec.uploads
