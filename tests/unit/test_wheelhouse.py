"""The agent's wheelhouse, built for real (pip, with its cache) and installed the way hosts install it:
``templates/scripts/agent-install.sh`` into a fresh venv, offline, with pip run from its wheel."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from roles.operations.common import script_text
from tritonfleet import wheelhouse

ROOT = Path(__file__).resolve().parents[2]
HOST_PYTHON = shutil.which("python3.11") or "/usr/bin/python3"


@pytest.fixture(scope="module")
def built():
    return wheelhouse.build()


def test_one_pure_wheel_set_for_every_host_python(built):
    names = built.wheels()
    assert all(n.endswith("-none-any.whl") for n in names), names
    for dist in ("tritonfleet_agent", "boto3", "botocore", "s3transfer", "pip"):
        assert sum(n.startswith(dist + "-") for n in names) == 1, (dist, names)  # one version: a small upload
    assert built.digest == wheelhouse.digest_of(built.path) and built.version.startswith("0.1.0+")


def test_the_agent_wheel_holds_the_agent_only(built):
    (agent,) = [p for p in built.path.glob("tritonfleet_agent-*.whl")]
    with zipfile.ZipFile(agent) as z:
        modules = {n for n in z.namelist() if n.endswith(".py")}
        meta = z.read(next(n for n in z.namelist() if n.endswith("METADATA"))).decode()
    assert modules == {"tritonfleet/__init__.py"} | {f"tritonfleet/{p.relative_to(ROOT / 'tritonfleet').as_posix()}"
                                                      for sub in ("agent", "agent/qa")
                                                      for p in (ROOT / "tritonfleet" / sub).glob("*.py")}
    assert "Requires-Dist: boto3" in meta and "Requires-Python: >=3.9" in meta


def test_the_build_is_cached_by_the_agent_source(built):
    again = wheelhouse.build.__wrapped__()
    assert again == built  # same key: the cached directory, same digest
    assert wheelhouse._key({"tritonfleet/agent/x.py": b"1"}) != wheelhouse._key({"tritonfleet/agent/x.py": b"2"})


def test_installs_offline_with_the_host_script_and_runs(built, tmp_path):
    venv = tmp_path / "venv"
    script = script_text("agent-install.sh")  # as operations send it: includes resolved
    env = {"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null", "HOME": str(tmp_path),  # no index at all
           "TF_LOCK_DIR": str(tmp_path / "lock")}
    proc = subprocess.run(["sh", "-c", script, "agent-install.sh", HOST_PYTHON, str(venv), str(built.path),
                           built.digest, f"tritonfleet-agent=={built.version}"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (venv / ".wheelhouse").read_text().strip() == built.digest
    out = subprocess.run([str(venv / "bin/tritonfleet-agent"), "sync", "--help"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "--server NAME=URL" in out
    listed = subprocess.run([str(venv / "bin/python"), "-c", "import boto3, tritonfleet.agent.live, sys; "
                             "print(sorted(m.split('.')[0] for m in sys.modules if m.startswith('tritonfleet')))"],
                            capture_output=True, text=True, timeout=60, check=True).stdout
    assert "tritonfleet" in listed
    pkgs = {p.name.split("-")[0].lower() for p in (venv / "lib").glob("python3*/site-packages/*.dist-info")}
    assert "pydantic" not in pkgs and "pyinfra" not in pkgs and "tritonfleet_agent" in pkgs


def test_the_qa_extra_installs_offline_for_this_python_and_machine(tmp_path):
    """The per-(Python, machine) wheelhouse: the agent with numpy, tritonclient and friends, offline."""
    import platform
    import sys

    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    built = wheelhouse.build((python, platform.machine()))
    assert any(n.startswith("numpy-") and "manylinux" in n for n in built.wheels())
    venv = tmp_path / "venv"
    script = script_text("agent-install.sh")
    env = {"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null", "HOME": str(tmp_path),
           "TF_LOCK_DIR": str(tmp_path / "lock")}
    proc = subprocess.run(["sh", "-c", script, "agent-install.sh", sys.executable, str(venv), str(built.path),
                           built.digest, f"tritonfleet-agent[{wheelhouse.qa_extras(python)}]=={built.version}"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    subprocess.run([str(venv / "bin/python"), "-c", "import numpy, tritonclient.grpc, tritonclient.http, yaml, pydantic"],
                   check=True, timeout=120)
    out = subprocess.run([str(venv / "bin/tritonfleet-agent"), "qa", "run", "--help"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "--suites" in out


def test_python_3_12_hosts_get_qa_over_grpc_only():
    """tritonclient[http] 2.51 pins a geventhttpclient with no cp312 wheels: 3.12 gets the gRPC client only."""
    assert wheelhouse.qa_extras("3.11") == "qa,qa-http" and wheelhouse.qa_extras("3.12") == "qa"
    built = wheelhouse.build(("3.12", "x86_64"))
    names = built.wheels()
    assert any(n.startswith("grpcio-") and "cp312" in n for n in names)
    assert not any(n.startswith("geventhttpclient-") for n in names)


@pytest.mark.parametrize("installed, in_place", [
    ({"setuptools": "84.2.1"}, True),
    ({"setuptools": "70.1.0"}, True),
    # a Python 3.11 venv of Debian 12 or Ubuntu 22.04 (an Auto Scaling group's bootstrap venv): no bdist_wheel, so
    # pip builds in an isolated environment (the sandbox's ASG boot found it: "invalid command 'bdist_wheel'")
    ({"setuptools": "66.1.1"}, False),
    ({"setuptools": "66.1.1", "wheel": "0.38.4"}, True),
    ({}, False),
])
def test_the_agent_wheel_is_built_in_place_only_by_a_setuptools_that_can(monkeypatch, installed, in_place):
    from importlib import metadata

    def version(name: str) -> str:
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(wheelhouse.metadata, "version", version)
    assert wheelhouse._builds_in_place() is in_place
