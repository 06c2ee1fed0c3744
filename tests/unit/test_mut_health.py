"""The host-health reader in detail (from the mutation survivors of tritonfleet/access/health.py): what
``tritonfleet -v`` shows of a look at a host (the containers Docker listed, or why it did not answer, each server
asked and its answer, the host's outcome and time), a Docker answer whose command did not finish, and the previous
spec read only when asked. Pure: a session stub that models the remote host (its Docker engine, its Triton servers
by port, its host records)."""

from __future__ import annotations

import json
import logging
import re

import pytest
from test_status_cli import _container

from tritonfleet import hostcontract as hc
from tritonfleet.access import dockerinspect, health


class _Remote:
    """A host as the reader's commands find it: ``docker`` (what its container list command gives: the containers,
    or ``(rc, out, err)``), the Triton servers by HTTP port (``(ready, {model: state})``; a port not there does not
    answer), and the host records by server."""

    name = "h1"

    def __init__(self, containers: list[dict] | tuple[int, str, str] | None = None, tritons: dict | None = None,
                 records: dict[str, str] | None = None) -> None:
        self.containers = containers if containers is not None else []
        self.tritons, self.records = tritons or {}, records or {}
        self.asked: list[str] = []
        self.closed = False

    def run(self, command, *, stdin=None, timeout=30, root=False):
        self.asked.append(command)
        if command == dockerinspect.containers_command(hc.TRITON_FILTER):
            if isinstance(self.containers, tuple):
                return self.containers
            return 0, "\n".join([dockerinspect.LISTED, *(json.dumps(c) for c in self.containers)]) + "\n", ""
        if command.startswith("cat "):
            server = next((s for s in self.records if command == f"cat {hc.record_path(s)}"), None)
            return (0, self.records[server], "") if server else (1, "", "cat: No such file or directory")
        port = re.search(r"b=http://\$a:(\d+)/v2;", command)
        if command.startswith("hdr=$(cat); for a in ") and port and int(port.group(1)) in self.tritons:
            ready, models = self.tritons[int(port.group(1))]
            if not ready:
                return 0, "", ""
            return 0, "@ready\n" + json.dumps([{"name": n, "version": "1", "state": s} for n, s in models.items()]), ""
        return 0, "", ""  # curl found nothing at any address: the loop ends without a line

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def said(caplog):
    """The reader's debug lines so far (what ``tritonfleet -v`` shows after ``tritonfleet.access.health: debug:``)."""
    caplog.set_level(logging.DEBUG, logger=health.logger.name)
    return lambda: [r.getMessage() for r in caplog.records if r.name == health.logger.name]


def _look(monkeypatch, remote: _Remote, data: dict | None = None, **kwargs) -> health.HostHealth:
    monkeypatch.setattr(health, "connect", lambda name, data: remote)
    seen = health.read_host("h1", data or {"ssh_hostname": "h1.example"}, **kwargs)
    assert remote.closed
    return seen


def _took(line: str, prefix: str) -> float:
    """The seconds at the end of the host's outcome line, after checking the line up to them."""
    assert line.startswith(prefix + " in ") and line.endswith("s"), line
    took = line.removeprefix(prefix + " in ").removesuffix("s")
    assert re.fullmatch(r"\d+\.\d", took), line
    return float(took)


def test_v_shows_what_docker_listed_each_server_asked_with_its_answer_and_the_hosts_outcome(monkeypatch, said):
    remote = _Remote([_container("left", "running", "0.0.0.0:8001"), _container("right", "running", "10.0.0.9:8002")],
                     tritons={8001: (True, {"b": "READY", "a": "READY", "c": "LOADING"})})
    seen = _look(monkeypatch, remote)
    assert [(s.server, s.port, s.triton_ready, s.models) for s in seen.servers] == [
        ("left", "8001", True, ["a", "b"]), ("right", "8002", False, None)]
    lines = said()
    assert lines[:3] == ["h1: docker has 2 Triton container(s): left, right",
                         "h1: left at h1.example:8001: ready, models ['a', 'b']",
                         "h1: right at 10.0.0.9:8002: not ready, models None"]
    assert len(lines) == 4 and seen.serving is False
    assert _took(lines[3], "h1: left: running, ready: a, b; right: running, ready: not answering") < 30


def test_v_says_serving_for_a_host_whose_servers_all_serve(monkeypatch, said):
    seen = _look(monkeypatch, _Remote([_container("triton", "running")], tritons={8000: (True, {"m": "READY"})}))
    assert seen.serving is True
    lines = said()
    assert lines[:2] == ["h1: docker has 1 Triton container(s): triton",
                         "h1: triton at h1.example:8000: ready, models ['m']"]
    assert len(lines) == 3 and _took(lines[2], "h1: serving") < 30


def test_v_says_when_docker_has_no_triton_container(said):
    assert health.triton_containers(_Remote([])) == {}
    assert said() == ["h1: docker has 0 Triton container(s): -"]


def test_v_shows_why_docker_did_not_answer_its_exit_status_and_300_characters_of_its_error(said):
    error = "Cannot connect to the Docker daemon " + "x" * 300
    with pytest.raises(health.DockerNotAnswering) as caught:
        health.triton_containers(_Remote((1, "", f"  {error}\nsecond line\n")))
    assert str(caught.value) == error
    assert said() == [f"h1: docker not answering (rc 1): {error[:300]}"]


def test_a_host_whose_docker_does_not_answer_says_so_for_every_server_the_inventory_places(monkeypatch, said):
    from types import SimpleNamespace

    monkeypatch.setattr(health, "placements", lambda name, data: {"left": SimpleNamespace(name="left", http_port=8010,
                                                                                          models=None)})
    seen = _look(monkeypatch, _Remote((125, "", "")))
    (server,) = seen.servers
    assert (server.server, server.port, server.container, server.docker_error) == (
        "left", "8010", None, "docker exited with status 125")
    lines = said()
    assert lines[:2] == ["h1: docker not answering (rc 125): ", "h1: left at h1.example:8010: not ready, models None"]
    assert _took(lines[2], "h1: left: docker not answering (docker exited with status 125), ready: not answering") < 30


@pytest.mark.parametrize("rc", [-1, 137])
def test_a_list_whose_command_did_not_finish_is_docker_not_answering_not_a_partial_answer(rc):
    """The list printed, then the command was cut short (the connection dropped: no exit status, -1; the shell
    killed): what it printed may miss containers, so it is not taken as Docker's answer."""
    out = "\n".join([dockerinspect.LISTED, json.dumps(_container("left", "running"))]) + "\n"
    with pytest.raises(health.DockerNotAnswering) as caught:
        health.triton_containers(_Remote((rc, out, "")))
    assert str(caught.value) == f"docker exited with status {rc}"


def _record(spec: str, previous: str | None) -> str:
    rec = {"name": "triton", "image": "tritonserver:2", "spec": spec, "run_args": [], "command": []}
    return json.dumps({**rec, "previous": previous and {**rec, "image": "tritonserver:1", "spec": previous}})


def test_the_previous_spec_is_read_only_when_asked(monkeypatch):
    def remote() -> _Remote:
        return _Remote([_container("triton", "running")], records={"triton": _record("new", "old")})

    (server,) = _look(monkeypatch, remote()).servers
    assert server.previous is None
    (server,) = _look(monkeypatch, remote(), previous=True).servers
    assert (server.previous.image, server.previous.spec) == ("tritonserver:1", "old")


def test_a_container_without_a_server_label_is_known_by_its_whole_name():
    """Docker's ``Name`` is ``/<name>``: only the slash goes (a name may start with any letter, X included)."""
    unlabelled = _container("x", "running")
    unlabelled["Name"] = "/XX-triton_1"
    del unlabelled["Config"]["Labels"][hc.LABEL_SERVER]
    found = health.triton_containers(_Remote([unlabelled, _container("left", "running")]))
    assert list(found) == ["XX-triton_1", "left"]
    assert list(dockerinspect.parse_containers([json.dumps(unlabelled)])) == ["XX-triton_1"]
