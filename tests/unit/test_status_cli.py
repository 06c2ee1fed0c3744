"""`tritonfleet status` from the outside: it needs an inventory, and a host out of reach is a row and a
non-zero exit (loopback only: a port nothing listens on). Then the reader below it
(``tritonfleet.access.health.read_host``) and the rows ``host_status`` renders from it, on a fake SSH session
whose commands really run: the container state Docker gives (``docker inspect`` with the contract's format),
Triton's readiness and READY models, and what "serving" means."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tritonfleet.face.cli import main


def test_status_requires_an_inventory(monkeypatch):
    monkeypatch.delenv("TRITONFLEET_INVENTORY", raising=False)
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 2 and "Missing option '--inventory'" in result.output


def test_unreachable_host_is_a_row_and_fails(tmp_path, monkeypatch):
    inv = tmp_path / "inv.py"
    inv.write_text("hosts = [('far', {'ssh_hostname': '127.0.0.1', 'ssh_port': 1, 'ssh_user': 'nobody'})]\n")
    monkeypatch.setenv("TRITONFLEET_INVENTORY", str(inv))
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 1
    row = next(line for line in result.output.splitlines() if "far" in line)
    assert "ssh:" in row and ("refused" in row.lower() or "unable to connect" in row.lower())


def _inspect(status: str, restarting: bool, restarts: int) -> dict:
    """What `docker inspect` says of a Triton container (the parts the contract reads)."""
    return {"Id": "c1", "Name": "/triton", "Image": "sha256:1", "RestartCount": restarts,
            "Config": {"Image": "tritonserver:1", "Env": [], "Labels": {
                "com.tritonfleet.role": "triton", "com.tritonfleet.server": "triton", "com.tritonfleet.cores": "0-1",
                "com.tritonfleet.endpoint": "0.0.0.0:8000"}},
            "State": {"Running": status == "running" or restarting, "Restarting": restarting, "Status": status,
                      "StartedAt": "2026-11-26T05:00:00.000000000Z"},
            "HostConfig": {"Devices": [{"PathOnHost": "/dev/neuron0"}]}}


def test_a_crash_looping_server_shows_restarting_and_does_not_serve():
    from tritonfleet import hostcontract as hc
    from tritonfleet.access.health import ServerHealth
    from tritonfleet.face.status import server_row

    data = {"ssh_hostname": "10.0.0.5"}
    looping = ServerHealth("h1", "triton", "8000", hc.container_summary(_inspect("restarting", True, 7)), None,
                           triton_ready=True, models=["add_sub"])  # caught between two crashes, it may even answer
    assert looping.serving is False and looping.state == "restarting (7 restarts)"
    row = server_row(data, looping)
    assert row["state"] == "restarting (7 restarts)" and row["serving"] is False
    row = server_row(data, ServerHealth("h1", "triton", "8000", hc.container_summary(_inspect("running", False, 0)),
                                        None, triton_ready=True, models=["add_sub"]))
    assert row["state"] == "running" and row["serving"] is True and row["devices"] == "neuron0"
    assert row["endpoint"] == "http://10.0.0.5:8000" and row["ready_models"] == "add_sub"
    row = server_row(data, ServerHealth("h1", "triton", "8000", None, "Cannot connect to the Docker daemon",
                                        triton_ready=True, models=["add_sub"]))
    assert row["state"].startswith("docker not answering") and row["serving"] is True


# -- the reader and host_status: a fake SSH session whose commands really run (bash), with a fake `curl` on PATH
# that answers like Triton at the addresses it is given, and a fake `docker` that answers `docker ps` and renders
# `docker inspect --format` templates ({{json .Field}}) over the containers it is given.

FAKE_CURL = '''#!{python}
"""curl as status's command line uses it, answering like Triton servers (config: $FAKE_TRITON)."""
import json, os, sys, urllib.parse
args = sys.argv[1:]
url = next(a for a in args if a.startswith("http://"))
parts = urllib.parse.urlsplit(url)
where = f"{{parts.hostname}}:{{parts.port}}"
servers = json.load(open(os.environ["FAKE_TRITON"]))
with open(os.environ["FAKE_TRITON"] + ".log", "a") as log:
    log.write(json.dumps({{"url": url, "args": args}}) + "\\n")
server = servers.get(where)
if server is None:
    sys.exit("curl: (7) Failed to connect to " + where)
if parts.path == "/v2/health/ready":
    sys.exit(0 if server["ready"] else "curl: (22) The requested URL returned error: 400")
if parts.path == "/v2/repository/index":
    header = sys.stdin.read() if "@-" in args else ""
    if "POST" not in args or header != server["header"]:
        sys.exit("curl: (22) The requested URL returned error: 403")
    print(json.dumps(server["index"]), end="")
    sys.exit(0)
sys.exit("curl: (22) The requested URL returned error: 404")
'''

FAKE_DOCKER = '''#!{python}
"""docker ps -q / docker inspect --format over the containers in $FAKE_DOCKER ({{"containers": [docker inspect
objects], "error": what a Docker that does not answer says, or "", "gone": ids listed but removed before the
inspect}})."""
import json, os, re, sys
state = json.load(open(os.environ["FAKE_DOCKER"]))
args = sys.argv[1:]
with open(os.environ["FAKE_DOCKER"] + ".log", "a") as log:
    log.write(json.dumps(args) + "\\n")
if state["error"]:
    sys.exit(state["error"])
containers = state["containers"]
if args[0] == "ps":
    flags, label = args[1], args[args.index("--filter") + 1].removeprefix("label=")
    assert set(flags) <= set("-aq") and "q" in flags, args
    for c in containers:
        if ("a" in flags or c["State"]["Running"]) and label in [f"{{k}}={{v}}" for k, v in c["Config"]["Labels"].items()]:
            print(c["Id"])
    for ref in state.get("gone", []):
        print(ref)
elif args[0] == "inspect":
    fmt, missing = args[args.index("--format") + 1], False
    for ref in args[args.index("--format") + 2:]:
        c = next((c for c in containers if c["Id"] == ref), None)
        if c is None:  # docker prints the others, and exits 1
            print("Error: No such object: " + ref, file=sys.stderr)
            missing = True
            continue

        def field(m, c=c):
            value = c
            for part in m.group(1).split("."):
                value = value.get(part) if isinstance(value, dict) else None
            return json.dumps(value)

        print(re.sub(r"\\{{\\{{json \\.([A-Za-z.]+)\\}}\\}}", field, fmt))
    sys.exit(1 if missing else 0)
else:
    sys.exit("docker: unexpected " + " ".join(args))
'''


class _Session:
    """What the reader uses of tritonfleet.access.ssh.Session: run() (here: bash on this machine, with the fake
    curl and docker first on PATH) and close()."""

    def __init__(self, tmp_path, servers: dict, containers: list[dict] | None, docker_error: str = "") -> None:
        self.name = "h1"
        self.bin = tmp_path / "bin"
        self.bin.mkdir(exist_ok=True)
        for name, script in (("curl", FAKE_CURL), ("docker", FAKE_DOCKER)):
            tool = self.bin / name
            tool.write_text(script.format(python=sys.executable))
            tool.chmod(0o755)
        self.config = tmp_path / "triton.json"
        self.config.write_text(json.dumps(servers))
        self.engine = tmp_path / "docker.json"
        self.engine.write_text(json.dumps({"containers": containers or [], "error": docker_error}))
        self.closed, self.commands, self.roots = False, [], []

    def run(self, command, *, stdin=None, timeout=30, root=False):
        self.commands.append(command)
        self.roots.append(root)
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "FAKE_TRITON": str(self.config),
               "FAKE_DOCKER": str(self.engine)}
        proc = subprocess.run(["sh", "-c", command], input=stdin or "", capture_output=True, text=True, env=env,
                              timeout=20)
        return proc.returncode, proc.stdout, proc.stderr

    def close(self):
        self.closed = True

    def curl_calls(self) -> list[str]:
        log = Path(str(self.config) + ".log")
        return [json.loads(line)["url"] for line in log.read_text().splitlines()] if log.exists() else []

    def docker_calls(self) -> list[list[str]]:
        log = Path(str(self.engine) + ".log")
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


SECRET = "s" * 24
HEADER = f"x-tritonfleet-repository-key: {SECRET}"


def _started() -> str:
    """Docker's StartedAt of a container started 2h05m20s ago (now: the test may run long after import)."""
    return (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2, minutes=5, seconds=20)).strftime(
        "%Y-%m-%dT%H:%M:%S.%f000Z")


def _container(server: str, status: str, endpoint: str = "0.0.0.0:8000", *, restarts: int = 0,
               role: str = "triton") -> dict:
    """`docker inspect` of a container in state ``status`` (running, exited, restarting, created)."""
    running = status in ("running", "restarting")
    started = _started()
    return {
        "Id": f"id-{server}", "Name": f"/{server}", "Image": "sha256:" + "1" * 64, "RestartCount": restarts,
        "Config": {"Image": "tritonserver:24.09", "Env": ["PATH=/usr/bin"], "Labels": {
            "com.tritonfleet.role": role, "com.tritonfleet.server": server, "com.tritonfleet.cores": "0-1",
            "com.tritonfleet.devices": "0", "com.tritonfleet.endpoint": endpoint, "com.tritonfleet.spec": "abc"}},
        "State": {"Status": status, "Running": running, "Paused": False, "Restarting": status == "restarting",
                  "OOMKilled": False, "Dead": False, "Pid": 4242 if running else 0, "ExitCode": 0 if running else 1,
                  "StartedAt": started if status != "created" else "0001-01-01T00:00:00Z",
                  "FinishedAt": "0001-01-01T00:00:00Z" if running else started},
        "HostConfig": {"Devices": [{"PathOnHost": "/dev/neuron0", "PathInContainer": "/dev/neuron0",
                                    "CgroupPermissions": "rwm"}]},
    }


def _triton(ready: bool, models: dict[str, str]) -> dict:
    """A Triton server as the fake curl answers for it: health, and the repository index (name -> state)."""
    index = [{"name": n, "version": "1", "state": s} | ({"reason": "load failed"} if s == "UNAVAILABLE" else {})
             for n, s in models.items()]
    return {"ready": ready, "header": HEADER, "index": index}


def _host_status(monkeypatch, session: _Session, data: dict | None = None, **kwargs) -> dict[str, dict]:
    """The rows of ``host_status``, checked against what the reader itself returned for the same host."""
    from tritonfleet.access import health
    from tritonfleet.face import status

    monkeypatch.setattr(health, "connect", lambda name, data: session)
    reads = []

    def read_host(*args, **kwargs):
        reads.append(health.read_host(*args, **kwargs))
        return reads[-1]

    monkeypatch.setattr(status, "read_host", read_host)
    data = {"ssh_hostname": "10.0.0.5", "triton_repository_secret": SECRET, **(data or {})}
    rows = status.host_status("h1", data, **kwargs)
    assert session.closed
    (read,) = reads
    assert isinstance(read, health.HostHealth) and rows == status.host_rows(data, read, **kwargs)
    if read.error is None:  # the reader's verdict is the table's
        assert [s.server for s in read.servers] == [r["server"] for r in rows]
        assert [(s.serving, s.state, s.ready) for s in read.servers] == [
            (r["serving"], r["state"], r["ready_models"]) for r in rows]
    else:
        assert rows == [{"host": "h1", "error": read.error, "serving": False}]
    return {r.get("server", "<error>"): r for r in rows}


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash runs the status command line")


@needs_bash
def test_host_status_reads_container_state_readiness_and_only_ready_models(monkeypatch, tmp_path):
    session = _Session(tmp_path, {"10.0.0.5:8000": _triton(True, {"resnet": "READY", "bert": "UNAVAILABLE",
                                                                  "add_sub": "READY", "old": "UNLOADING"})},
                       [_container("triton", "running")])
    rows = _host_status(monkeypatch, session)
    assert set(rows) == {"triton"}
    row = rows["triton"]
    assert row["state"] == "running" and row["serving"] is True
    assert row["ready_models"] == "add_sub, resnet"  # READY only, sorted: not the UNAVAILABLE or unloading ones
    assert row["uptime"] == "2h05m" and row["image"] == "tritonserver:24.09" and row["devices"] == "neuron0"
    assert row["cores"] == "0-1" and row["endpoint"] == "http://10.0.0.5:8000"
    # Triton asked at the address clients use, with the repository header on stdin (never on the command line)
    assert session.curl_calls() == ["http://10.0.0.5:8000/v2/health/ready", "http://10.0.0.5:8000/v2/repository/index"]
    assert SECRET not in "".join(session.commands)
    # the Triton containers only, stopped ones included, asked as root; inspected with the contract's format only
    from tritonfleet.access.dockerinspect import INSPECT_FORMAT

    assert session.docker_calls() == [["ps", "-aq", "--filter", "label=com.tritonfleet.role=triton"],
                                          ["inspect", "--format", INSPECT_FORMAT, "id-triton"]]
    # (the third: the watchdog's state file, root's too)
    assert session.roots == ["docker ps" in command or "watchdog/last.json" in command
                             for command in session.commands] == [True, False, True]


@needs_bash
@pytest.mark.parametrize("state", ["exited", "dead", "created"])
def test_a_stopped_container_that_does_not_answer_is_not_serving(monkeypatch, tmp_path, state):
    session = _Session(tmp_path, {}, [_container("triton", state)])
    row = _host_status(monkeypatch, session)["triton"]
    assert row["state"] == state and row["serving"] is False
    assert row["uptime"] == "-" and row["ready_models"] == "not answering"


@needs_bash
def test_a_server_that_is_not_ready_is_not_serving_even_when_its_container_runs(monkeypatch, tmp_path):
    session = _Session(tmp_path, {"10.0.0.5:8000": _triton(False, {"resnet": "READY"})},
                       [_container("triton", "running")])
    row = _host_status(monkeypatch, session)["triton"]
    assert row["state"] == "running" and row["serving"] is False and row["ready_models"] == "not answering"
    assert session.curl_calls()[-1].endswith("/v2/health/ready")  # not ready: its index is not asked


@needs_bash
@pytest.mark.parametrize("models", [{}, {"resnet": "UNAVAILABLE", "bert": "LOADING"}])
def test_a_ready_server_with_no_ready_model_serves_and_lists_none(monkeypatch, tmp_path, models):
    session = _Session(tmp_path, {"10.0.0.5:8000": _triton(True, models)}, [_container("triton", "running")])
    row = _host_status(monkeypatch, session)["triton"]
    assert row["serving"] is True and row["ready_models"] == "-"


@needs_bash
def test_a_restarting_container_does_not_serve_even_if_triton_answers(monkeypatch, tmp_path):
    session = _Session(tmp_path, {"10.0.0.5:8000": _triton(True, {"resnet": "READY"})},
                       [_container("triton", "restarting", restarts=4)])
    row = _host_status(monkeypatch, session)["triton"]
    assert row["state"] == "restarting (4 restarts)" and row["serving"] is False


@needs_bash
def test_a_server_bound_to_one_address_is_asked_there_and_loopback_is_the_fallback(monkeypatch, tmp_path):
    servers = {"10.0.0.7:8000": _triton(True, {"a": "READY"}), "127.0.0.1:8010": _triton(True, {"b": "READY"})}
    session = _Session(tmp_path, servers, [_container("left", "running", "10.0.0.7:8000"),
                                           _container("right", "running", "0.0.0.0:8010")])
    rows = _host_status(monkeypatch, session)
    assert rows["left"]["ready_models"] == "a" and rows["left"]["endpoint"] == "http://10.0.0.7:8000"
    assert rows["right"]["ready_models"] == "b" and rows["right"]["endpoint"] == "http://10.0.0.5:8010"
    assert rows["left"]["serving"] and rows["right"]["serving"]
    calls = session.curl_calls()
    assert "http://10.0.0.5:8000/v2/health/ready" not in calls  # left is not asked at the host's address
    assert calls.index("http://10.0.0.5:8010/v2/health/ready") < calls.index("http://127.0.0.1:8010/v2/health/ready")


@needs_bash
def test_servers_the_inventory_places_are_rows_whatever_docker_says(monkeypatch, tmp_path):
    data = {"instance_type": "inf2.24xlarge", "neuron_key_fingerprint": "A" * 40,
            "triton_servers": [{"name": "left", "devices": [0, 1, 2]}, {"name": "right", "devices": [3, 4, 5]}]}
    # the Docker daemon is down (live-restore): left still serves, right does not answer
    session = _Session(tmp_path, {"10.0.0.5:8000": _triton(True, {"resnet": "READY"})}, None,
                       docker_error="Cannot connect to the Docker daemon at unix:///var/run/docker.sock\nmore")
    rows = _host_status(monkeypatch, session, data)
    assert list(rows) == ["left", "right"]
    assert rows["left"]["state"].startswith("docker not answering (Cannot connect") and rows["left"]["serving"]
    assert rows["left"]["ready_models"] == "resnet"
    assert rows["right"]["serving"] is False and rows["right"]["endpoint"] == "http://10.0.0.5:8010"
    # Docker answers, right's container is gone: a missing row, not serving
    session = _Session(tmp_path, {"10.0.0.5:8000": _triton(True, {"resnet": "READY"})},
                       [_container("left", "running", "0.0.0.0:8000"),
                        _container("dcgm", "running", "0.0.0.0:9400", role="dcgm-exporter")])
    rows = _host_status(monkeypatch, session, data)
    assert list(rows) == ["left", "right"]  # not the DCGM exporter's container
    assert rows["right"]["state"] == "missing (expected right)" and rows["right"]["serving"] is False


@needs_bash
def test_a_host_with_no_triton_server_or_out_of_reach_is_one_error_row(monkeypatch, tmp_path):
    from tritonfleet.access import health
    from tritonfleet.access.ssh import HostUnreachable
    from tritonfleet.face import status

    rows = _host_status(monkeypatch, _Session(tmp_path, {}, [_container("dcgm", "running", role="dcgm-exporter")]))
    assert rows["<error>"] == {"host": "h1", "error": "no Triton servers", "serving": False}
    rows = _host_status(monkeypatch, _Session(tmp_path, {}, None, docker_error="permission denied"))
    assert rows["<error>"]["error"] == "no Triton servers (docker: permission denied)"

    def unreachable(name, data):
        raise HostUnreachable("ssh: timed out")

    monkeypatch.setattr(health, "connect", unreachable)
    assert status.host_status("h1", {}) == [{"host": "h1", "error": "ssh: timed out", "serving": False}]
    assert health.read_host("h1", {}) == health.HostHealth("h1", unreachable="ssh: timed out")
    assert health.read_host("h1", {}).serving is False
