"""A sandbox host booted from user data (tritonfleet/sandbox/cloudinit.py): what goes into its disk before it boots,
the user data it refuses, the bounded wait for the run, and the host wheels its bundle installs from
(tritonfleet/sandbox/pypi.py). The boot itself, with the AWS CLI installed into a real root, runs in
tests/e2e/test_16_asg_boot.py."""

from __future__ import annotations

import configparser
import importlib.metadata
import stat
import subprocess
from pathlib import Path

import pytest

from tritonfleet.sandbox import cloudinit, layout, pypi
from tritonfleet.sandbox.layout import SandboxError

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = b"#!/bin/bash\necho hello\n"


@pytest.mark.parametrize("data, why", [
    (b"#cloud-config\npackages: [git]\n", "script user data only"),
    (b"Content-Type: multipart/mixed; boundary=x\n", "script user data only"),
    (b"", "script user data only"),
    (b"#!/bin/sh\n" + b"#" * 16384, "at most 16384"),
])
def test_user_data_that_is_not_a_script_ec2_takes_is_refused_in_one_line(data, why):
    with pytest.raises(SandboxError, match=why) as exc:
        cloudinit.check_user_data(data, "boot.sh")
    assert str(exc.value).startswith("boot.sh: ") and "\n" not in str(exc.value)


def test_prepare_writes_the_script_its_unit_and_the_regions_endpoints(tmp_path, monkeypatch):
    installed = []
    monkeypatch.setattr(cloudinit, "install_aws_cli", lambda root, wheels: installed.append((root, wheels)))
    cloudinit.prepare(tmp_path, SCRIPT, [Path("/w/awscli.whl")])
    script = tmp_path / cloudinit.SCRIPT
    assert script.read_bytes() == SCRIPT and stat.S_IMODE(script.stat().st_mode) == 0o700
    saved = tmp_path / cloudinit.INSTANCE_DIR / "user-data.txt"
    assert saved.read_bytes() == SCRIPT and stat.S_IMODE(saved.stat().st_mode) == 0o600
    # the unit runs it once, on boot (multi-user), with the region's endpoints
    unit = (tmp_path / "etc/systemd/system" / cloudinit.UNIT).read_text()
    assert f"ExecStart=/{cloudinit.SCRIPT}\n" in unit
    assert f"ConditionPathExists=!{cloudinit.BOOT_FINISHED}\n" in unit and "Type=oneshot" in unit
    assert "EnvironmentFile=/etc/tritonfleet-sandbox/cloud.env" in unit
    wants = tmp_path / "etc/systemd/system/multi-user.target.wants" / cloudinit.UNIT
    assert wants.is_symlink() and str(wants.readlink()) == f"/etc/systemd/system/{cloudinit.UNIT}"
    env = dict(line.split("=", 1) for line in (tmp_path / "etc/tritonfleet-sandbox/cloud.env").read_text().split())
    assert env == {"AWS_ENDPOINT_URL": layout.s3_endpoint(),
                   "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://{layout.BRIDGE_IP}:{layout.IMDS_PORT}"}
    pip = configparser.ConfigParser()
    pip.read_string((tmp_path / "etc/pip.conf").read_text())
    assert pip["global"]["index-url"] == layout.pypi_index_url()
    assert installed == [(tmp_path, [Path("/w/awscli.whl")])]
    # a second prepare (the same disk) is the same
    cloudinit.prepare(tmp_path, SCRIPT, [])
    assert wants.is_symlink() and script.read_bytes() == SCRIPT


def test_the_aws_cli_needs_its_wheels(tmp_path):
    with pytest.raises(SandboxError, match="no awscli or pip wheel"):
        cloudinit.install_aws_cli(tmp_path, [tmp_path / "pip-26.3-py3-none-any.whl"])
    assert not (tmp_path / "usr/local/bin/aws").exists()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_wait_ends_with_the_result_and_says_it_still_runs_every_30_s():
    clock, said, reads = Clock(), [], []

    def read(command: str) -> str:
        reads.append(command)
        return "success 0 2026-11-28T20:00:00Z\n" if clock.now >= 70 else ""

    result = cloudinit.wait_boot(read, 100, say=said.append, clock=clock, sleep=clock.sleep)
    assert result == "success 0 2026-11-28T20:00:00Z"
    assert said == ["user data running for 30 s", "user data running for 60 s"]
    assert all(cloudinit.BOOT_FINISHED in r for r in reads) and len(reads) == 15


def test_a_read_past_its_time_limit_is_a_host_still_busy_with_its_user_data():
    clock, answers = Clock(), iter([subprocess.TimeoutExpired("ssh", 30), "", "exit-code 1 2026-11-28T20:00:00Z"])

    def read(_command: str) -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert cloudinit.wait_boot(read, 100, clock=clock, sleep=clock.sleep) == "exit-code 1 2026-11-28T20:00:00Z"


def test_the_wait_is_bounded_and_says_where_the_output_is():
    clock = Clock()
    with pytest.raises(SandboxError, match=r"still runs after 20 s .*cloud-init-output.log"):
        cloudinit.wait_boot(lambda _c: "", 20, clock=clock, sleep=clock.sleep)
    assert clock.now == 20


# -- the host wheels ----------------------------------------------------------------------------------------------

def test_the_bundles_requirements_are_its_dependencies_build_requirements_and_pip():
    reqs = pypi.bundle_requirements(ROOT)
    assert "pyinfra~=3.10.0" in reqs and "setuptools>=68" in reqs and "wheel" in reqs and reqs[-1] == "pip"
    assert not any("pytest" in r or "moto" in r for r in reqs)  # no test or sandbox extras
    with pytest.raises(SandboxError, match="pyproject.toml"):
        pypi.bundle_requirements(ROOT / "tests")


def test_the_constraints_are_the_versions_this_controller_runs():
    constraints = dict(c.split("==") for c in pypi.controller_constraints())
    assert constraints["boto3"] == importlib.metadata.version("boto3")
    assert constraints["pydantic"] == importlib.metadata.version("pydantic")
    assert "tritonfleet" not in constraints


def test_host_wheels_are_for_the_hosts_python_and_platform():
    args = pypi._host_platform_args("x86_64")
    assert args[:5] == ["--only-binary=:all:", "--python-version", pypi.HOST_PYTHON, "--implementation", "cp"]
    assert "manylinux_2_36_x86_64" in args and "manylinux2014_x86_64" in args
    assert not any("aarch64" in a for a in args)


def test_without_a_download_only_wheels_already_there_are_served(tmp_path):
    assert pypi.fetch_host_wheels(tmp_path, ROOT, download=False) == []
    assert not (tmp_path / "host-wheels").exists()
