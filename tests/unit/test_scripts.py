"""The shell programs in templates/scripts, run for real with sh: real gpg for keys, stand-in ``docker``,
``curl``, ``dpkg`` and ``apt-get`` commands (small scripts on PATH that keep their state in files)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from tritonfleet.templating import template_path


def script(name: str) -> str:
    return str(template_path(f"scripts/{name}"))


def run(name: str, *args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", script(name), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def stand_ins(tmp_path: Path, **commands: str) -> tuple[dict, Path]:
    """Stand-in commands first on PATH; they keep their state in the returned directory ($STATE)."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, body in commands.items():
        stub(bin_dir, name.replace("_", "-"), body)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "STATE": str(state)}, state


# -- keyring.sh -------------------------------------------------------------------------------------------

def _gen_key(home: Path, uid: str) -> str:
    env = {**os.environ, "GNUPGHOME": str(home)}
    home.mkdir(mode=0o700, exist_ok=True)
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"],
                   check=True, capture_output=True, env=env)
    out = subprocess.run(["gpg", "--batch", "--with-colons", "--list-keys", uid], check=True, capture_output=True,
                         text=True, env=env).stdout
    return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    base = tmp_path_factory.mktemp("keys")
    home = base / "gnupg"
    fprs = [_gen_key(home, "one@example.com"), _gen_key(home, "two@example.com")]
    env = {**os.environ, "GNUPGHOME": str(home)}
    for i, uid in enumerate(["one@example.com", "two@example.com"]):
        (base / f"k{i}.asc").write_bytes(subprocess.run(["gpg", "--batch", "--armor", "--export", uid],
                                                        check=True, capture_output=True, env=env).stdout)
    (base / "both.asc").write_bytes((base / "k0.asc").read_bytes() + (base / "k1.asc").read_bytes())
    return base, fprs


def test_keyring_installs_a_key_with_the_expected_fingerprint(keys, tmp_path):
    base, (fpr, _) = keys
    dest = tmp_path / "keyrings" / "neuron.gpg"
    proc = run("keyring.sh", f"file://{base}/k0.asc", str(dest), fpr, "0")
    assert proc.returncode == 0, proc.stderr
    assert not dest.read_bytes().startswith(b"-----BEGIN")  # binary keyring for signed-by=
    assert oct(dest.stat().st_mode & 0o777) == "0o644"
    armored = tmp_path / "RPM-GPG-KEY-neuron"
    assert run("keyring.sh", f"file://{base}/k0.asc", str(armored), fpr, "1").returncode == 0
    assert armored.read_bytes().startswith(b"-----BEGIN PGP PUBLIC KEY BLOCK")


def test_keyring_refuses_a_wrong_fingerprint_and_writes_nothing(keys, tmp_path):
    base, (fpr, other) = keys
    dest = tmp_path / "neuron.gpg"
    proc = run("keyring.sh", f"file://{base}/k1.asc", str(dest), fpr, "0")
    assert proc.returncode == 1 and not dest.exists()
    assert f"key fingerprint mismatch for file://{base}/k1.asc: expected {fpr}, got {other}" in proc.stderr


def test_keyring_refuses_a_file_with_two_keys(keys, tmp_path):
    base, (fpr, _) = keys
    proc = run("keyring.sh", f"file://{base}/both.asc", str(tmp_path / "k.gpg"), fpr, "0")
    assert proc.returncode == 1 and "holds 2 keys, expected exactly one" in proc.stderr
    proc = run("keyring.sh", f"file://{base}/missing.asc", str(tmp_path / "k.gpg"), fpr, "0")
    assert proc.returncode == 1 and "cannot download key" in proc.stderr


# -- triton-swap.sh ------------------------------------------------------------------------------------------

DOCKER = """\
    # stand-in docker: a container is a file $STATE/<name> holding its state
    cmd=$1; shift
    echo "$cmd $*" >> "$STATE/calls"
    case "$cmd" in
      inspect) [ -f "$STATE/$1" ] ;;
      rm) shift; rm -f "$STATE/$1" ;;
      stop) echo stopped > "$STATE/$1" ;;
      start) echo running > "$STATE/$1" ;;
      rename) mv "$STATE/$1" "$STATE/$2" ;;
      run) [ -z "${FAIL_RUN:-}" ] || exit 125; shift 2; name=$1; shift; echo "running $*" > "$STATE/$name" ;;
      *) exit 2 ;;
    esac
"""


@pytest.fixture
def docker_env(tmp_path):
    return stand_ins(tmp_path, docker=DOCKER)


def swap(env, record: Path, body: str = '{"spec": "new"}'):
    return run("triton-swap.sh", "triton", str(record), body, "--", "--device", "/dev/neuron0", "img:1",
               "tritonserver", env=env)


def test_swap_first_start_writes_the_record_0600(docker_env, tmp_path):
    env, state = docker_env
    record = tmp_path / "servers" / "triton.json"
    proc = swap(env, record)
    assert proc.returncode == 0, proc.stderr
    assert (state / "triton").read_text().startswith("running --device /dev/neuron0 img:1 tritonserver")
    assert json.loads(record.read_text()) == {"spec": "new"} and oct(record.stat().st_mode & 0o777) == "0o600"


def test_swap_replaces_the_old_container(docker_env, tmp_path):
    env, state = docker_env
    (state / "triton").write_text("running old\n")
    assert swap(env, tmp_path / "triton.json").returncode == 0
    assert (state / "triton").read_text().startswith("running --device")
    assert not (state / "triton.previous").exists()


def test_swap_restores_the_old_container_when_run_fails(docker_env, tmp_path):
    env, state = docker_env
    (state / "triton").write_text("running old\n")
    record = tmp_path / "triton.json"
    record.write_text('{"spec": "old"}\n')
    proc = swap({**env, "FAIL_RUN": "1"}, record)
    assert proc.returncode == 1 and "the previous container (if any) was restored" in proc.stderr
    assert (state / "triton").read_text() == "running\n"  # renamed back and started
    assert json.loads(record.read_text()) == {"spec": "old"}


def test_swap_says_the_record_is_stale_when_it_cannot_be_written(docker_env, tmp_path):
    env, _ = docker_env
    (tmp_path / "file").write_text("")
    proc = swap(env, tmp_path / "file" / "triton.json")  # its directory cannot exist
    assert proc.returncode == 1 and "the record is stale" in proc.stderr


# -- triton-ready.sh -----------------------------------------------------------------------------------------

READY_DOCKER = """\
    case "$1" in
      inspect) cat "$STATE/state" ;;
      logs) cat "$STATE/log" ;;
    esac
"""
CURL = """\
    for a in "$@"; do url=$a; done
    case "$url" in
      */v2/health/ready) [ -f "$STATE/ready" ] ;;
      */v2/models/*/ready) m=${url%/ready}; [ -f "$STATE/model-${m##*/}" ] ;;
      *) exit 7 ;;
    esac
"""
TRITON_LOG = """\
I1126 05:00:00.000 1 server.cc:674] +------------------+
I1126 05:00:00.000 1 server.cc:674] | Option           | Value |
E1126 05:00:01.000 1 model_lifecycle.cc:641] failed to load 'add_sub': Failed to initialize Python stub: RuntimeError: boom
I1126 05:00:02.000 1 server.cc:674] | model_repository_path | /models |
"""


@pytest.fixture
def ready_env(tmp_path):
    env, state = stand_ins(tmp_path, docker=READY_DOCKER, curl=CURL)
    (state / "log").write_text(TRITON_LOG)
    return env, state


def test_ready_when_server_and_models_are(ready_env):
    env, state = ready_env
    (state / "state").write_text("running 0\n")
    (state / "ready").touch()
    (state / "model-add_sub").touch()
    assert run("triton-ready.sh", "triton", "http://127.0.0.1:8000", "30", "add_sub", env=env).returncode == 0


def test_not_running_stops_at_once_with_the_first_error_lines(ready_env):
    env, state = ready_env
    (state / "state").write_text("restarting 3\n")
    proc = run("triton-ready.sh", "triton", "http://127.0.0.1:8000", "600", "add_sub", env=env, timeout=20)
    assert proc.returncode == 1
    assert "triton is not running (restarting 3)" in proc.stderr
    assert "Failed to initialize Python stub: RuntimeError: boom" in proc.stderr
    assert "Option" not in proc.stderr  # the options table is not the cause
    assert proc.stderr.count("waiting up to") == 1  # progress is one line


def test_timeout_names_the_models(ready_env):
    env, state = ready_env
    (state / "state").write_text("running 0\n")
    (state / "ready").touch()
    proc = run("triton-ready.sh", "triton", "http://127.0.0.1:8000", "1", "add_sub", env=env)
    assert proc.returncode == 1 and "not ready after 1s (http://127.0.0.1:8000; models: add_sub)" in proc.stderr


# -- packages.sh ---------------------------------------------------------------------------------------------

DPKG = """\
        echo "dpkg $*" >> "$STATE/calls"
        case "$*" in
          --audit) [ -f "$STATE/interrupted" ] && echo "The following packages are only half configured" ;;
          *--configure\\ -a*) rm -f "$STATE/interrupted" ;;
        esac
        true
    """


def test_packages_repairs_an_interrupted_dpkg_and_waits_for_the_lock(tmp_path):
    env, state = stand_ins(tmp_path, dpkg=DPKG, apt_get='echo "apt-get $*" >> "$STATE/calls"\n')
    (state / "interrupted").touch()
    proc = run("packages.sh", "apt", "install", "120", "aws-neuronx-dkms=2.30.2.0*", env=env)
    assert proc.returncode == 0, proc.stderr
    calls = (state / "calls").read_text().splitlines()
    assert "repairing an interrupted dpkg: dpkg --configure -a" in proc.stderr
    assert any("--configure -a" in c for c in calls) and not (state / "interrupted").exists()
    install = [c for c in calls if c.startswith("apt-get") and " install " in c]
    assert install == ["apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends --allow-downgrades "
                       "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold aws-neuronx-dkms=2.30.2.0*"]
    repair = next(i for i, c in enumerate(calls) if "--configure -a" in c)
    assert repair < calls.index(install[0])
