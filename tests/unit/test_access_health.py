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


def _pull(**over) -> dict:
    """A pull state as ``tritonfleet-agent pull`` writes it (the spec's "On the host")."""
    return {"release": "v2", "source": "s3://b/p/v2/", "pointer": "RELEASE", "pointed": "v2",
            "version": "000003-20261127T120000Z", "last_check": 1764270000.1, "last_change": 1764269000.0,
            "last_error": None, "failures": 0, "next_check": 1764270002.1, "interval": 2.0, "pid": 1234,
            "updated": 1764270000.2, **over}


@pytest.fixture
def state_files(host, monkeypatch, tmp_path):
    """The watchdog's and pull mode's state files of the fake host, under tmp_path (neither there yet)."""
    from tritonfleet.agent import watchrun

    watchdog, pull = tmp_path / "watchdog" / "last.json", tmp_path / "lib" / "models-pull.json"
    watchdog.parent.mkdir()
    pull.parent.mkdir()
    monkeypatch.setattr(watchrun, "STATE_FILE", str(watchdog))
    monkeypatch.setattr(hc, "PULL_STATE_FILE", str(pull))
    monkeypatch.setattr(health, "connect", lambda name, data: host.session(**data))
    return watchdog, pull


def test_pull_state_is_read_as_root_from_the_contracts_file(host, state_files):
    _, pull = state_files
    session = host.session(_sudo=True)
    assert health.pull_state(session) is None  # the host does not pull
    pull.write_text(json.dumps(_pull()))  # no newline at the end, as json.dump leaves it
    assert health.pull_state(session) == _pull()
    pull.write_text(json.dumps(_pull(release=None, pointed="v3", failures=2), indent=2) + "\n")
    assert health.pull_state(session) == _pull(release=None, pointed="v3", failures=2)
    assert host.client.commands == [f"sudo -n sh -c 'cat {pull}'"] * 3
    for text in ('{"release": "v2", "poin', '["v2"]', ""):  # half a file, not an object, empty
        pull.write_text(text)
        assert health.pull_state(session) is None, text
    pull.write_text(json.dumps(_pull()))
    host.env["FAKE_SUDO_REFUSE"] = "1"
    assert health.pull_state(session) is None  # root's file, and no root: not read


def test_read_host_reads_both_state_files_in_one_command(host, state_files):
    watchdog, pull = state_files
    data = {"ssh_hostname": "127.0.0.1", "_sudo": True}
    seen = health.read_host("h1", data, watchdog=True, pull=True)
    assert (seen.watchdog, seen.pull) == (None, None)  # neither on the host
    # docker, Triton (one server), the state files: three commands, as with the watchdog's file alone
    assert len(host.client.commands) == 3
    (states,) = [c for c in host.sudo_calls() if str(pull) in c]
    assert str(watchdog) in states and states.index(str(watchdog)) < states.index(str(pull))
    pull.write_text(json.dumps(_pull()))
    seen = health.read_host("h1", data, watchdog=True, pull=True)
    assert (seen.watchdog, seen.pull) == (None, _pull())  # one missing: the other is still read
    watchdog.write_text(json.dumps({"schema": 1, "at": 5.0, "actions": []}, indent=1))
    seen = health.read_host("h1", data, watchdog=True, pull=True)
    assert (seen.watchdog, seen.pull) == ({"schema": 1, "at": 5.0, "actions": []}, _pull())
    assert len(host.client.commands) == 3
    pull.write_text("{half a file")
    seen = health.read_host("h1", data, watchdog=True, pull=True)
    assert (seen.watchdog, seen.pull) == ({"schema": 1, "at": 5.0, "actions": []}, None)
    pull.write_text(json.dumps(_pull()) + "\n")
    seen = health.read_host("h1", data, pull=True)
    assert (seen.watchdog, seen.pull) == (None, _pull())  # the pull state alone: one plain cat
    assert host.client.commands[-1] == f"sudo -n sh -c 'cat {pull}'"
    seen = health.read_host("h1", data)
    assert (seen.watchdog, seen.pull) == (None, None) and len(host.client.commands) == 2  # not asked: not read


def test_state_files_are_read_in_order_each_on_its_own(host, tmp_path):
    files = [tmp_path / name for name in ("a.json", "b.json", "c.json", "d.json")]
    files[0].write_text('{"a": 1}')
    files[1].write_text("{\n  \"b\": [\n    2\n  ]\n}\n")  # one written with indent, ending in a newline
    files[3].write_text('{"d": "x\\n@@file\\ny"}')  # an escaped newline and the mark: still one string
    session = host.session()
    assert health.state_files(session, *map(str, files)) == [{"a": 1}, {"b": [2]}, None, {"d": "x\n@@file\ny"}]
    (command,) = host.client.commands
    assert health.state_files(session) == [] and host.client.commands == [command]  # nothing asked: no command
    files[2].write_text('{"c": 3}\n@@file\n{"e": 4}')  # a broken file that fakes a mark: not taken apart
    assert health.state_files(session, *map(str, files)) == [None] * 4
    files[2].write_text('{"c": 3}')
    host.env["FAKE_SUDO_REFUSE"] = "1"
    assert health.state_files(host.session(_sudo=True), *map(str, files)) == [None] * 4


def test_a_state_file_root_cannot_read_is_none_not_the_next_ones(host, tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b"
    first.write_text('{"a": 1}')
    second.mkdir()  # cat fails on a directory
    third = tmp_path / "c.json"
    third.write_text('{"c": 3}')
    assert health.state_files(host.session(), str(first), str(second), str(third)) == [{"a": 1}, None, {"c": 3}]


class _Answers:
    """A session whose run() gives one canned answer, recording the commands."""

    name = "h1"

    def __init__(self, rc: int, out: str) -> None:
        self.rc, self.out, self.commands = rc, out, []

    def run(self, command, *, stdin=None, timeout=30, root=False):
        self.commands.append((command, root))
        return self.rc, self.out, ""


@pytest.mark.parametrize("rc, out, want", [
    (0, '\n@@file\n{"a": 1}\n@@file\n{"b": 2}', [{"a": 1}, {"b": 2}]),
    (1, '\n@@file\n{"a": 1}\n@@file\n{"b": 2}', [None, None]),  # a command that failed: not trusted
    (0, 'Welcome!\n@@file\n{"a": 1}\n@@file\n{"b": 2}', [None, None]),  # something before the first file
    (0, '\n@@file\n{"a": 1}', [None, None]),  # one file short
    (0, "", [None, None]),
])
def test_what_the_state_files_command_answers_means(rc, out, want):
    session = _Answers(rc, out)
    assert health.state_files(session, "/a", "/b") == want
    assert session.commands == [("printf '\\n@@file\\n'; cat /a 2>/dev/null || true; "
                                 "printf '\\n@@file\\n'; cat /b 2>/dev/null || true", True)]


def test_a_single_state_file_read_that_failed_is_not_trusted_whatever_it_printed():
    assert health.state_files(_Answers(0, '{"a": 1}'), "/a") == [{"a": 1}]
    assert health.state_files(_Answers(1, '{"a": 1}'), "/a") == [None]
    assert health.pull_state(_Answers(1, json.dumps(_pull()))) is None
    session = _Answers(0, json.dumps(_pull()))
    assert health.pull_state(session) == _pull() and session.commands == [(f"cat {hc.PULL_STATE_FILE}", True)]
