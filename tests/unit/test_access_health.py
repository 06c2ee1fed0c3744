"""The host-health reader's Docker side and the SSH session under it: ``docker inspect`` run through a real
:class:`tritonfleet.access.ssh.Session` (its paramiko client replaced by one that runs each command in a local
shell, with fake ``docker`` and ``sudo`` first on PATH), under ``sudo -n`` where the host uses sudo, every value
quoted on its way to the remote shell; what a Docker that does not answer, or loses a container between the list
and the inspect, gives; and the session's debug lines (no secret: those go on stdin)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from test_status_cli import FAKE_DOCKER, _container

from tritonfleet import hostcontract as hc
from tritonfleet.access import dockerinspect, health, ssh

FAKE_SUDO = """#!/bin/sh
# sudo -n as Session.run calls it: logged, then the command runs
[ "$1" = "-n" ] || { echo "sudo: expected -n" >&2; exit 1; }
shift
printf '%s\\n' "$*" >> "$FAKE_SUDO_LOG"
[ -z "$FAKE_SUDO_REFUSE" ] || { echo "sudo: a password is required" >&2; exit 1; }
exec "$@"
"""


class _Exec:
    """One exec_command: paramiko's stdin, stdout and stderr channel files, run when stdin is shut."""

    def __init__(self, command: str, env: dict, cwd) -> None:
        self.command, self.env, self.cwd, self.data, self.done = command, env, cwd, "", None
        self.channel = self

    def write(self, data: str) -> None:
        self.data += data

    def shutdown_write(self) -> None:
        self.done = subprocess.run(["sh", "-c", self.command], input=self.data, capture_output=True, text=True,
                                   env=self.env, cwd=self.cwd, timeout=30)

    def recv_exit_status(self) -> int:
        return self.done.returncode


class _Stream:
    def __init__(self, run: _Exec, which: str) -> None:
        self.run, self.which, self.channel = run, which, run

    def read(self) -> bytes:
        return getattr(self.run.done, self.which).encode()


class _Client:
    """paramiko.SSHClient as Session uses it; the commands it was given in ``commands``."""

    def __init__(self, env: dict, cwd) -> None:
        self.env, self.cwd, self.commands, self.closed = env, cwd, [], False

    def exec_command(self, command: str, timeout: float):
        self.commands.append(command)
        run = _Exec(command, self.env, self.cwd)
        return run, _Stream(run, "stdout"), _Stream(run, "stderr")

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A session to a host whose docker has the containers written to ``host.engine`` (default: one running
    Triton server, ``triton``)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in (("docker", FAKE_DOCKER.format(python=sys.executable)), ("sudo", FAKE_SUDO),
                         ("curl", "#!/bin/sh\necho 'curl: (7) Failed to connect' >&2\nexit 7\n")):
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    engine = tmp_path / "docker.json"
    engine.write_text(json.dumps({"containers": [_container("triton", "running")], "error": ""}))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DOCKER": str(engine),
           "FAKE_SUDO_LOG": str(tmp_path / "sudo.log")}

    class Host:
        def __init__(self) -> None:
            self.engine, self.env, self.tmp = engine, env, tmp_path

        def session(self, **data) -> ssh.Session:
            self.client = _Client(self.env, tmp_path)
            return ssh.Session("h1", data, self.client)

        def docker_calls(self) -> list[list[str]]:
            log = tmp_path / "docker.json.log"
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

        def sudo_calls(self) -> list[str]:
            log = tmp_path / "sudo.log"
            return log.read_text().splitlines() if log.exists() else []

    return Host()


def test_the_containers_are_read_with_the_contracts_format_through_sudo_where_the_host_uses_it(host):
    session = host.session(_sudo=True)
    found = health.triton_containers(session)
    assert list(found) == ["triton"] and found["triton"]["status"] == "running"
    assert found["triton"] == hc.container_summary(_container("triton", "running")) | {
        "started_at": found["triton"]["started_at"]}
    (command,) = host.client.commands
    assert command.startswith("sudo -n sh -c ")
    assert host.docker_calls() == [["ps", "-aq", "--filter", hc.TRITON_FILTER],
                                   ["inspect", "--format", dockerinspect.INSPECT_FORMAT, "id-triton"]]
    assert host.sudo_calls() == [f"sh -c {dockerinspect.containers_command()}"]


def test_without_sudo_docker_runs_as_the_ssh_user(host):
    session = host.session()
    assert list(health.triton_containers(session)) == ["triton"]
    assert host.client.commands == [dockerinspect.containers_command()] and host.sudo_calls() == []


def test_a_container_gone_between_the_list_and_the_inspect_is_left_out(host):
    host.engine.write_text(json.dumps({"containers": [_container("triton", "running")], "error": "",
                                       "gone": ["id-removed"]}))
    assert list(health.triton_containers(host.session())) == ["triton"]
    assert host.docker_calls()[-1] == ["inspect", "--format", dockerinspect.INSPECT_FORMAT, "id-triton", "id-removed"]


def test_no_triton_container_is_an_empty_answer_not_an_error(host):
    host.engine.write_text(json.dumps({"containers": [_container("dcgm", "running", role="dcgm-exporter")],
                                       "error": ""}))
    assert health.triton_containers(host.session()) == {}
    assert [c[0] for c in host.docker_calls()] == ["ps"]  # nothing to inspect


@pytest.mark.parametrize("error, sudo_refuses, said", [
    ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\nmore",
     False, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"),
    ("", True, "sudo: a password is required"),
])
def test_a_docker_that_does_not_answer_says_why_in_one_line(host, monkeypatch, error, sudo_refuses, said):
    host.engine.write_text(json.dumps({"containers": [], "error": error}))
    if sudo_refuses:
        host.env["FAKE_SUDO_REFUSE"] = "1"
    with pytest.raises(health.DockerNotAnswering) as caught:
        health.triton_containers(host.session(_sudo=True))
    assert str(caught.value) == said


def test_no_docker_at_all_is_docker_not_answering(host):
    (host.tmp / "sh-only").mkdir()
    (host.tmp / "sh-only" / "sh").symlink_to("/bin/sh")
    host.env["PATH"] = str(host.tmp / "sh-only")
    with pytest.raises(health.DockerNotAnswering, match="docker.*not found"):
        health.triton_containers(host.session())


def test_every_value_reaching_the_remote_shell_is_quoted(host):
    """A label filter with shell syntax reaches docker as one argument and runs nothing (also under sudo's
    second shell)."""
    hostile = "label=x=$(touch pwned) `touch pwned2`; touch pwned3 '\""
    session = host.session(_sudo=True)
    rc, out, err = session.run(dockerinspect.containers_command(hostile), root=True)
    assert rc == 0, err
    assert host.docker_calls() == [["ps", "-aq", "--filter", hostile]]
    assert not any((host.tmp / name).exists() for name in ("pwned", "pwned2", "pwned3"))


def test_the_session_logs_each_command_with_its_status_and_never_its_stdin(host, caplog):
    caplog.set_level(logging.DEBUG, logger=ssh.logger.name)
    session = host.session(_sudo=True)
    rc, out, _ = session.run("cat; exit 3", stdin="x-key: s3cret", root=True)
    assert (rc, out) == (3, "x-key: s3cret")
    (line,) = [r.getMessage() for r in caplog.records if r.name == ssh.logger.name]
    assert line.startswith("h1: rc 3 in ") and line.endswith("s (sudo): cat; exit 3")
    assert "s3cret" not in caplog.text


def test_connecting_logs_where_to_and_why_it_failed(caplog):
    caplog.set_level(logging.DEBUG, logger=ssh.logger.name)
    with pytest.raises(ssh.HostUnreachable):
        ssh.connect("far", {"ssh_hostname": "127.0.0.1", "ssh_port": 1, "ssh_user": "nobody", "ssh_key": "/k"})
    lines = [r.getMessage() for r in caplog.records if r.name == ssh.logger.name]
    assert lines[0] == "far: ssh nobody@127.0.0.1:1 (key /k, timeout 10s)"
    assert lines[1].startswith("far: ssh failed: ") and len(lines) == 2


def test_read_host_over_a_session_renders_like_status(host, monkeypatch):
    """The whole reader over the session (Triton not answering: no curl server on loopback)."""
    monkeypatch.setattr(health, "connect", lambda name, data: host.session(**data))
    seen = health.read_host("h1", {"ssh_hostname": "127.0.0.1", "_sudo": True})
    (server,) = seen.servers
    assert (server.server, server.port, server.state, server.triton_ready, server.serving) == (
        "triton", "8000", "running", False, False)
    assert seen.error is None and seen.serving is False
    assert seen.seen() == "triton: running, ready: not answering" and host.client.closed


@pytest.mark.parametrize("exc, said", [(TimeoutError(), "TimeoutError"), (OSError("Socket is closed\nmore"),
                                                                          "Socket is closed")])
def test_a_session_failing_while_docker_is_asked_is_docker_not_answering(host, exc, said):
    """As any failure of the Docker SDK was: a row saying so, not the end of `tritonfleet status`."""
    session = host.session()

    def run(command, **kwargs):
        raise exc

    session.run = run
    with pytest.raises(health.DockerNotAnswering) as caught:
        health.triton_containers(session)
    assert str(caught.value) == said


def test_read_host_reads_the_watchdogs_state_file_as_root_when_asked(host, monkeypatch, tmp_path):
    from tritonfleet.agent import watchrun

    state = tmp_path / "watchdog" / "last.json"
    monkeypatch.setattr(watchrun, "STATE_FILE", str(state))
    monkeypatch.setattr(health, "connect", lambda name, data: host.session(**data))
    data = {"ssh_hostname": "127.0.0.1", "_sudo": True}
    assert health.read_host("h1", data, watchdog=True).watchdog is None  # no watchdog on the host
    state.parent.mkdir()
    state.write_text(json.dumps({"schema": 1, "at": 5.0, "actions": []}))
    assert health.read_host("h1", data, watchdog=True).watchdog == {"schema": 1, "at": 5.0, "actions": []}
    assert health.read_host("h1", data).watchdog is None  # not asked: not read (the rollout's health gate)
    state.write_text("{half a file")
    assert health.read_host("h1", data, watchdog=True).watchdog is None
    assert any(f"cat {state}" in call for call in host.sudo_calls())  # through sudo: the file is root's
