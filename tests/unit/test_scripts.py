"""The shell programs in templates/scripts, run for real with sh: real gpg for keys, stand-in ``docker``,
``curl``, ``dpkg`` and ``apt-get`` commands (small scripts on PATH that keep their state in files)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from roles.operations.common import script_text as script_body

LOCK_DIR = tempfile.mkdtemp(prefix="tf-lock-")  # this test process's host lock (lib-lock.sh), not the machine's


def run(name: str, *args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run a script the way operations do: its text (includes resolved) through ``sh -c``."""
    return subprocess.run(["sh", "-c", script_body(name), name, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "TF_LOCK_DIR": LOCK_DIR, **(env or {})})


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
    yield base, fprs
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True)


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
    # stand-in docker: a container is a file $STATE/<name>: "<state> <image> <args...>"
    cmd=$1; shift
    echo "$cmd $*" >> "$STATE/calls"
    fmt=""
    [ "$cmd" = inspect ] && [ "${1:-}" = -f ] && { fmt=$2; shift 2; }
    case "$cmd" in
      inspect) [ -f "$STATE/$1" ] || exit 1
        set -- $(cat "$STATE/$1")
        case "$fmt" in
          *Config.Image*) echo "$2" ;;
          *State.Status*) case "$2" in *bad*) echo "restarting 3" ;; *) echo "$1 0" ;; esac ;;
        esac ;;
      rm) shift; rm -f "$STATE/$1" ;;
      stop) sed -i 's/^running/exited/' "$STATE/$1" ;;
      start) sed -i 's/^exited/running/' "$STATE/$1" ;;
      rename) mv "$STATE/$1" "$STATE/$2" ;;
      logs) echo "E1126 model_lifecycle.cc:641] failed to load 'add_sub': RuntimeError: boom" ;;
      run) [ -z "${FAIL_RUN:-}" ] || exit 125; shift 2; name=$1; shift
        while [ "${1#-}" != "$1" ]; do shift 2; done  # options and their values
        echo "running $*" > "$STATE/$name" ;;
      *) exit 2 ;;
    esac
"""
READY_CURL = """\
    # ready while the container named triton runs a good image
    grep -q '^running [^ ]*good' "$STATE/triton" 2>/dev/null
"""


@pytest.fixture
def docker_env(tmp_path):
    return stand_ins(tmp_path, docker=DOCKER, curl=READY_CURL)


def swap(env, record: Path, image: str = "img:good", body: str = '{"spec": "new"}'):
    return run("triton-swap.sh", "triton", str(record), body, "http://127.0.0.1:8000", "5", "add_sub", "--",
               "--device", "/dev/neuron0", image, "tritonserver", env=env, timeout=60)


def test_swap_first_start_writes_the_record_0600(docker_env, tmp_path):
    env, state = docker_env
    record = tmp_path / "servers" / "triton.json"
    proc = swap(env, record)
    assert proc.returncode == 0, proc.stderr
    assert (state / "triton").read_text() == "running img:good tritonserver\n"
    assert json.loads(record.read_text()) == {"spec": "new"} and oct(record.stat().st_mode & 0o777) == "0o600"


def test_swap_replaces_the_old_container(docker_env, tmp_path):
    env, state = docker_env
    (state / "triton").write_text("running img:good-old tritonserver\n")
    assert swap(env, tmp_path / "triton.json").returncode == 0
    assert (state / "triton").read_text() == "running img:good tritonserver\n"
    assert not (state / "triton.previous").exists()


def test_swap_restores_the_old_container_when_run_fails(docker_env, tmp_path):
    env, state = docker_env
    (state / "triton").write_text("running img:good-old tritonserver\n")
    record = tmp_path / "triton.json"
    record.write_text('{"spec": "old"}\n')
    proc = swap({**env, "FAIL_RUN": "1"}, record)
    assert proc.returncode == 1
    assert "docker run of triton failed; rolled back to the previous container (img:good-old), which serves again" \
        in proc.stderr
    assert (state / "triton").read_text() == "running img:good-old tritonserver\n"
    assert json.loads(record.read_text()) == {"spec": "old"}


def test_swap_rolls_back_when_the_new_server_fails_its_health_gate(docker_env, tmp_path):
    env, state = docker_env
    (state / "triton").write_text("running img:good-old tritonserver\n")
    record = tmp_path / "triton.json"
    record.write_text('{"spec": "old"}\n')
    proc = swap(env, record, image="img:bad")
    assert proc.returncode == 1
    assert "triton is not running (restarting 3)" in proc.stderr and "RuntimeError: boom" in proc.stderr
    assert ("the new triton failed its health gate; rolled back to the previous container (img:good-old), "
            "which serves again") in proc.stderr
    assert (state / "triton").read_text() == "running img:good-old tritonserver\n"
    assert not (state / "triton.previous").exists() and json.loads(record.read_text()) == {"spec": "old"}


def test_swap_without_a_previous_container_says_so(docker_env, tmp_path):
    env, _ = docker_env
    proc = swap(env, tmp_path / "triton.json", image="img:bad")
    assert proc.returncode == 1 and "there was no previous container to roll back to" in proc.stderr
    assert not (tmp_path / "triton.json").exists()


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


def test_the_wait_looks_quickly_for_5_seconds_then_every_second(ready_env, tmp_path):
    """A server that comes up at once is seen within 0.2 s; a slow one is then asked once a second (a stand-in
    ``sleep`` logs each pause and lets the server come up at its 30th)."""
    env, state = ready_env
    (state / "state").write_text("running 0\n")
    stub(tmp_path / "bin", "sleep", """\
        echo "$1" >> "$STATE/pauses"
        [ "$(wc -l < "$STATE/pauses")" -ge 30 ] && touch "$STATE/ready"
        true
    """)
    assert run("triton-ready.sh", "triton", "http://127.0.0.1:8000", "600", env=env).returncode == 0
    assert (state / "pauses").read_text().split() == ["0.2"] * 25 + ["1"] * 5


# -- packages.sh ---------------------------------------------------------------------------------------------

DPKG = """\
        echo "dpkg $*" >> "$STATE/calls"
        case "$*" in
          *--configure\\ -a*) rm -f "$STATE/interrupted" ;;
        esac
        true
    """
DPKG_QUERY = """\
        echo "ii  base-files"
        [ -f "$STATE/interrupted" ] && echo "iF  aws-neuronx-dkms"
        true
    """


def test_packages_repairs_an_interrupted_dpkg_and_waits_for_the_lock(tmp_path):
    env, state = stand_ins(tmp_path, dpkg=DPKG, dpkg_query=DPKG_QUERY, apt_get='echo "apt-get $*" >> "$STATE/calls"\n')
    env["DPKG_ADMINDIR"] = str(tmp_path / "admin")  # no pending updates there
    env["TRITONFLEET_APT_STAMP"] = str(tmp_path / "apt.stamp")
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
    update = calls.index("apt-get -o DPkg::Lock::Timeout=120 update -q")  # no stamp yet: lists refreshed first
    assert update < calls.index(install[0]) and (tmp_path / "apt.stamp").exists()
    (state / "calls").write_text("")
    assert run("packages.sh", "apt", "install", "120", "curl", env=env).returncode == 0
    assert not any(" update " in c for c in (state / "calls").read_text().splitlines())  # fresh stamp: no update


# -- models-switch.sh ----------------------------------------------------------------------------------------

def test_models_switch_updates_removes_and_leaves_no_empty_dirs(tmp_path):
    staging, live = tmp_path / "staging", tmp_path / "live"
    (staging / "add_sub" / "1").mkdir(parents=True)
    (staging / "add_sub" / "config.pbtxt").write_text("new config\n")
    (staging / "add_sub" / "1" / "model.py").write_text("same\n")
    (live / "add_sub" / "1").mkdir(parents=True)
    (live / "add_sub" / "config.pbtxt").write_text("old config\n")
    (live / "add_sub" / "1" / "model.py").write_text("same\n")
    (live / "gone" / "1").mkdir(parents=True)
    (live / "gone" / "1" / "model.py").write_text("x\n")
    inode = (live / "add_sub" / "1" / "model.py").stat().st_ino
    previous = tmp_path / "previous"
    proc = run("models-switch.sh", str(staging), str(live), str(previous), "0")
    assert proc.returncode == 0, proc.stderr
    assert (previous / "add_sub" / "config.pbtxt").read_text() == "old config\n"  # kept for restores
    assert (previous / "gone" / "1" / "model.py").exists()
    assert (live / "add_sub" / "config.pbtxt").read_text() == "new config\n"
    assert (live / "add_sub" / "1" / "model.py").stat().st_ino == inode  # unchanged files are not touched
    assert not (live / "gone").exists()
    assert sorted(p.name for p in live.rglob("*")) == ["1", "add_sub", "config.pbtxt", "model.py"]
    assert "updated add_sub/config.pbtxt" in proc.stderr and "removed gone" in proc.stderr


# -- triton-models.sh ----------------------------------------------------------------------------------------

TRITON_API = """\
    # stand-in curl for Triton's HTTP API: model state in $STATE/models/<m> (READY or UNAVAILABLE)
    out=/dev/null; code=0; method=GET; url=""
    while [ $# -gt 0 ]; do
      case "$1" in
        -o) out=$2; shift ;;
        -w) code=1; shift ;;
        -X) method=$2; shift ;;
        -H) echo "$2" >> "$STATE/headers"; shift ;;
        -m) shift ;;
        -*) ;;
        *) url=$1 ;;
      esac
      shift
    done
    path=${url#*/v2/}
    reply() { printf '%s' "$2" > "$out"; [ "$code" = 1 ] && printf '%s' "$1"; true; }  # no -f: exit 0
    case "$method $path" in
      "GET health/ready") exit 0 ;;
      "GET models/"*/ready) m=${path#models/}; m=${m%/ready}; grep -qx READY "$STATE/models/$m" 2>/dev/null ;;
      "POST repository/models/"*/load) m=${path#repository/models/}; m=${m%/load}; echo "load $m" >> "$STATE/calls"
        if [ -f "$STATE/fail-$m" ]; then echo UNAVAILABLE > "$STATE/models/$m"; reply 400 '{"error":"failed to load '"'$m'"', Failed to initialize Python stub: RuntimeError: boom"}'
        else echo READY > "$STATE/models/$m"; reply 200 '{}'; fi ;;
      "POST repository/models/"*/unload) m=${path#repository/models/}; m=${m%/unload}; echo "unload $m" >> "$STATE/calls"
        rm -f "$STATE/models/$m"; reply 200 '{}' ;;
      "POST repository/index") body="["; sep=""
        for f in "$STATE"/models/*; do [ -f "$f" ] || continue; m=${f##*/}; s=$(cat "$f")
          r=""; [ "$s" = READY ] || r=',"reason":"load failed: RuntimeError: boom"'
          body="$body$sep{\\"name\\":\\"$m\\",\\"version\\":\\"1\\",\\"state\\":\\"$s\\"$r}"; sep=","; done
        reply 200 "$body]" ;;
      *) exit 22 ;;
    esac
"""
STARTED_DOCKER = """\
    [ "$1" = inspect ] || exit 0
    case "$3" in
      *StartedAt*) date -u -d @"$(cat "$STATE/started")" +%Y-%m-%dT%H:%M:%S.000000000Z ;;
      *) echo "running 0" ;;
    esac
"""


@pytest.fixture
def triton_api(tmp_path):
    env, state = stand_ins(tmp_path, curl=TRITON_API, docker=STARTED_DOCKER)
    (state / "models").mkdir()
    repo = tmp_path / "repo"
    for m in ("add_sub", "other"):
        (repo / m / "1").mkdir(parents=True)
        (repo / m / "config.pbtxt").write_text(f'name: "{m}"\n')
        (state / "models" / m).write_text("READY\n")
    for path in repo.rglob("*"):  # written before the container started
        os.utime(path, (1_000_000, 1_000_000))
    (state / "started").write_text("2000000\n")  # the container started after the files were written

    def gate(*models: str):
        return subprocess.run(["sh", "-c", script_body("triton-models.sh"), "triton-models.sh", "triton",
                               "http://127.0.0.1:8000", "5", str(repo), str(tmp_path / "stamps"), str(tmp_path / "previous"),
                               *models],
                              input="x-key: s3cret\n", capture_output=True, text=True, timeout=30,
                              env={**os.environ, **env})
    return gate, repo, state


def calls(state):
    return (state / "calls").read_text().splitlines() if (state / "calls").exists() else []


def test_models_gate_leaves_unchanged_models_alone(triton_api):
    gate, _, state = triton_api
    proc = gate("add_sub", "other")
    assert proc.returncode == 0, proc.stderr
    assert calls(state) == []


def test_models_gate_loads_a_changed_model_and_a_new_one(triton_api):
    gate, repo, state = triton_api
    gate("add_sub", "other")
    (repo / "add_sub" / "1" / "model.py").write_text("# v2\n")  # newer than its stamp
    (repo / "fresh" / "1").mkdir(parents=True)
    (repo / "fresh" / "config.pbtxt").write_text('name: "fresh"\n')
    proc = gate("add_sub", "other", "fresh")
    assert proc.returncode == 0, proc.stderr
    assert sorted(calls(state)) == ["load add_sub", "load fresh"]
    assert gate("add_sub", "other", "fresh").returncode == 0 and len(calls(state)) == 2  # the next run: nothing


def test_models_gate_reports_tritons_reason_and_restores_the_previous_version(triton_api, tmp_path):
    gate, repo, state = triton_api
    import shutil

    shutil.copytree(repo, tmp_path / "previous")  # what models-switch.sh keeps
    (repo / "add_sub" / "1" / "model.py").write_text("raise RuntimeError('boom')\n")
    (state / "fail-add_sub").touch()
    proc = gate("add_sub", "other")
    assert proc.returncode == 1
    assert "model add_sub did not load (HTTP 400)" in proc.stderr and "RuntimeError: boom" in proc.stderr
    assert "s3cret" not in proc.stderr and (state / "headers").read_text().splitlines()[0] == "x-key: s3cret"
    assert "restored the previous version of add_sub" in proc.stderr
    assert not (repo / "add_sub" / "1" / "model.py").exists()  # the files before the switch are back


def test_a_new_model_that_fails_leaves_the_live_repository(triton_api):
    gate, repo, state = triton_api
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text('name: "broken"\n')
    (state / "fail-broken").touch()
    proc = gate("add_sub", "other", "broken")
    assert proc.returncode == 1 and "took the new model broken out of the live repository" in proc.stderr
    assert not (repo / "broken").exists()


def test_models_gate_unloads_models_that_left_the_repository(triton_api):
    gate, repo, state = triton_api
    import shutil

    assert gate("add_sub", "other").returncode == 0  # loaded: a stamp each
    shutil.rmtree(repo / "other")
    proc = gate("add_sub")
    assert proc.returncode == 0, proc.stderr
    assert calls(state) == ["unload other"] and "unloading other" in proc.stderr


def test_packages_does_not_repair_a_healthy_dpkg(tmp_path):
    env, state = stand_ins(tmp_path, dpkg=DPKG, dpkg_query=DPKG_QUERY, apt_get='echo "apt-get $*" >> "$STATE/calls"\n')
    env["DPKG_ADMINDIR"] = str(tmp_path / "admin")
    env["TRITONFLEET_APT_STAMP"] = str(tmp_path / "apt.stamp")
    proc = run("packages.sh", "apt", "install", "120", "curl", env=env)
    assert proc.returncode == 0 and "repairing" not in proc.stderr
    assert not any("--configure" in c for c in (state / "calls").read_text().splitlines())


# -- qa-run.sh --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body, code, says", [
    ("echo '2 cases, 2 passed'; echo 'report: /r/S.json /r/S.xml'; exit 0", 0, ""),
    ("echo '2 cases, 1 failed'; echo 'report: /r/S.json /r/S.xml'; exit 1", 0, "failing cases on this host"),
    ("echo 'Traceback (most recent call last):' >&2; exit 1", 1, "without writing its report"),
    ("echo 'qa: error: suite add_sub.yaml: bad' >&2; exit 2", 2, "the QA runner failed (exit 2)"),
    ("exit 3", 3, "the QA runner failed (exit 3)"),
    ("kill -9 $$", 1, "took longer than 5s"),
    ("kill -15 $$", 143, "the QA runner failed (exit 143)"),
])
def test_qa_run_fails_every_non_zero_runner_exit_but_failing_cases_with_a_report(tmp_path, body, code, says):
    runner = tmp_path / "runner"
    runner.write_text(f"#!/bin/sh\n{body}\n")
    runner.chmod(0o755)
    done = run("qa-run.sh", "5", str(runner), "qa", "run")
    assert done.returncode == code, done.stderr
    assert says in done.stderr
    if "report:" in body:
        assert "report: /r/S.json" in done.stdout  # the runner's own lines still reach the operation's output


def test_qa_run_over_its_time_fails_and_a_missing_runner_fails(tmp_path):
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\necho 'report: /r/S.json'\nsleep 30\n")
    slow.chmod(0o755)
    done = run("qa-run.sh", "1", str(slow))
    assert done.returncode == 1 and "took longer than 1s (qa_timeout)" in done.stderr
    done = run("qa-run.sh", "5", str(tmp_path / "no-such-agent"), "qa", "run")
    assert done.returncode == 127 and "the QA runner failed (exit 127)" in done.stderr


# -- lib-lock.sh: one host-wide lock for the scripts that change the host -----------------------------------

def test_a_second_script_waits_for_the_first_and_a_bound_names_the_holder(tmp_path):
    """A killed run's script still running on the host: the next run's script waits for it, naming it."""
    lock_dir = tmp_path / "lock"
    env = {"TF_LOCK_DIR": str(lock_dir), "TF_LOCK_WAIT": "30"}
    holder = subprocess.Popen(["sh", "-c", script_body("secret-file.sh"), "secret-file.sh", str(tmp_path / "s1")],
                              stdin=subprocess.PIPE, env={**os.environ, **env}, text=True)
    try:  # holds the lock while it waits for its standard input
        for _ in range(100):
            if (lock_dir / "host.lock.holder").exists():
                break
            time.sleep(0.05)
        assert (lock_dir / "host.lock.holder").read_text().split() == [str(holder.pid), "secret-file.sh"]
        short = run("secret-file.sh", str(tmp_path / "s2"), env={**env, "TF_LOCK_WAIT": "1"})
        assert short.returncode == 1 and not (tmp_path / "s2").exists()
        assert f"ERROR: another tritonfleet script still holds {lock_dir}/host.lock after 1 s: pid {holder.pid} " \
               f"secret-file.sh" in short.stderr and f"kill {holder.pid})" in short.stderr, short.stderr
        waiter = subprocess.Popen(["sh", "-c", script_body("secret-file.sh"), "secret-file.sh", str(tmp_path / "s3")],
                                  stdin=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env}, text=True)
        time.sleep(1)
        assert waiter.poll() is None  # waiting
        holder.communicate("one", timeout=10)
        _, err = waiter.communicate("two", timeout=30)
        assert waiter.returncode == 0 and f"pid {holder.pid} secret-file.sh" in err
        assert (tmp_path / "s1").read_text() == "one" and (tmp_path / "s3").read_text() == "two"
    finally:
        for p in (holder,):
            if p.poll() is None:
                p.kill()


# -- agent-install.sh: atomic, a half-written venv never in use -------------------------------------------

FAKE_PYTHON = """\
#!/bin/sh
# a stand-in host python: "-m venv --without-pip DIR" makes DIR/bin/python (itself); as a venv's python,
# ".../pip install ..." installs a tritonfleet-agent command (after $SLOW seconds); -V says its version
if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$4/bin" && cp "$0" "$4/bin/python" && exit 0; fi
case "$1" in
  */pip) [ -n "${SLOW:-}" ] && sleep "$SLOW"
         bin=$(dirname "$0"); printf '#!/bin/sh\\nexit 0\\n' > "$bin/tritonfleet-agent"; chmod +x "$bin/tritonfleet-agent";;
  -V) echo "Python 3.11.2";;
esac
"""


@pytest.fixture
def install_env(tmp_path):
    py = tmp_path / "python3"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    wh = tmp_path / "wheelhouse"
    (wh / "pip-24.0-py3-none-any.whl").mkdir(parents=True)
    return str(py), tmp_path / "opt" / "venv", str(wh)


def _install(install_env, digest, **env):
    py, venv, wh = install_env
    venv.parent.mkdir(parents=True, exist_ok=True)
    return run("agent-install.sh", py, str(venv), wh, digest, "tritonfleet-agent==0.1.0", env=env)


def test_agent_install_switches_a_symlink_to_a_complete_venv_and_keeps_the_previous_one(install_env):
    _, venv, _ = install_env
    assert _install(install_env, "d1").returncode == 0
    assert os.readlink(venv) == "venvs/d1" and (venv / ".wheelhouse").read_text() == "d1\n"
    assert _install(install_env, "d2").returncode == 0
    assert os.readlink(venv) == "venvs/d2"
    assert _install(install_env, "d3").returncode == 0
    assert sorted(os.listdir(venv.parent / "venvs")) == ["d2", "d3"]  # d2 kept: an old agent may still run


def test_a_killed_install_is_never_the_venv_in_use_and_the_next_one_replaces_it(install_env, tmp_path):
    py, venv, wh = install_env
    assert _install(install_env, "d1").returncode == 0
    killed = subprocess.Popen(["sh", "-c", script_body("agent-install.sh"), "agent-install.sh", py, str(venv), wh,
                               "d2", "tritonfleet-agent==0.1.0"],
                              env={**os.environ, "TF_LOCK_DIR": LOCK_DIR, "SLOW": "30"}, start_new_session=True)
    half = venv.parent / "venvs" / "d2" / "bin" / "python"
    for _ in range(100):
        if half.exists():
            break
        time.sleep(0.05)
    time.sleep(0.3)
    os.killpg(killed.pid, 9)
    killed.wait(10)
    assert os.readlink(venv) == "venvs/d1" and (venv / ".wheelhouse").read_text() == "d1\n"  # still whole
    assert not (venv.parent / "venvs" / "d2" / ".wheelhouse").exists()  # the half-written one
    again = _install(install_env, "d2")
    assert again.returncode == 0, again.stderr
    assert os.readlink(venv) == "venvs/d2" and (venv / ".wheelhouse").read_text() == "d2\n"


def test_agent_install_replaces_the_old_layouts_directory(install_env):
    _, venv, _ = install_env
    (venv / "bin").mkdir(parents=True)
    (venv / ".wheelhouse").write_text("old\n")
    assert _install(install_env, "d1").returncode == 0
    assert os.path.islink(venv) and os.readlink(venv) == "venvs/d1" and not (venv.parent / "venv.old").exists()
