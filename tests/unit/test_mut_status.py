"""``tritonfleet status`` in detail (from the mutation survivors of tritonfleet/face/status.py, whose reading
is now tritonfleet/access/health.py): uptimes as Docker's timestamps give them, endpoints, the command that asks
Triton and what its answers mean, the previous spec, rows without a container, the repository header, the
exporters column, and the printed table."""

from __future__ import annotations

import datetime as dt
import json
import sys

import pytest

from tritonfleet import hostcontract as hc
from tritonfleet.access import health
from tritonfleet.agent import watchrun
from tritonfleet.face import status


def _ago(seconds: int, fmt: str) -> str:
    return (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)).strftime(fmt)


def _uptime_near(started: str, *expected: str) -> None:
    assert status._uptime(started, True) in expected


def test_uptime_in_hours_and_minutes_or_minutes_and_seconds():
    _uptime_near(_ago(30 * 3600 + 7 * 60 + 20, "%Y-%m-%dT%H:%M:%S.%f000Z"), "30h07m")
    _uptime_near(_ago(3600 + 5, "%Y-%m-%dT%H:%M:%SZ"), "1h00m")
    _uptime_near(_ago(5 * 60 + 3, "%Y-%m-%dT%H:%M:%SZ"), "5m03s", "5m04s")
    _uptime_near(_ago(7, "%Y-%m-%dT%H:%M:%S+00:00"), "0m07s", "0m08s")
    _uptime_near(_ago(59 * 60 + 30, "%Y-%m-%dT%H:%M:%S.%fZ"), "59m30s", "59m31s")
    # Docker's RFC 3339 nano timestamps drop trailing zeros: a short fraction still ends in Z
    _uptime_near(_ago(2 * 3600 + 60, "%Y-%m-%dT%H:%M:%S.5Z"), "2h00m", "2h01m")


@pytest.mark.parametrize("started, running", [("2026-11-26T05:00:00Z", False), ("", True),
                                              ("0001-01-01T00:00:00Z", True)])
def test_no_uptime_for_a_container_not_running_or_never_started(started, running):
    assert status._uptime(started, running) == "-"


@pytest.mark.parametrize("endpoint, data, url", [
    ("10.0.0.7:8001", {"ssh_hostname": "h"}, "http://10.0.0.7:8001"),
    ("0.0.0.0:8000", {"ssh_hostname": "h.example"}, "http://h.example:8000"),
    (":::8002", {"ssh_hostname": "h.example"}, "http://h.example:8002"),
    (":8003", {}, "http://?:8003"),
    (None, {"ssh_hostname": "h"}, "-"),
])
def test_the_endpoint_clients_use(endpoint, data, url):
    labels = {hc.LABEL_ENDPOINT: endpoint} if endpoint is not None else {"other": "x"}
    assert status._endpoint(data, labels) == url


#: How the command that reads several state files at once starts (tritonfleet.access.health.state_files).
STATE_FILES = "printf '\\n@@file\\n'; cat "


class _Canned:
    """A session whose run() answers with what it is given, recording what it was asked."""

    def __init__(self, out: str = "", rc: int = 0, record: str | None = None, containers=None,
                 record_rc: int = 0) -> None:
        self.out, self.rc, self.record, self.calls, self.closed = out, rc, record, [], False
        self.containers, self.record_rc = containers, record_rc

    name = "h1"

    def run(self, command, *, stdin=None, timeout=30, root=False):
        self.calls.append({"command": command, "stdin": stdin, "root": root})
        if command.startswith("cat "):
            return (self.record_rc, self.record, "") if self.record is not None else (1, "", "No such file")
        if command.startswith(STATE_FILES):  # the state files, read together: none on this host
            return 0, "\n@@file\n" * command.count("; cat "), ""
        if command.startswith("ids=$(docker ps "):  # a Docker that does not answer says nothing here
            if self.containers is None:
                return 1, "", ""
            return 0, "\n".join(["@@listed", *(json.dumps(c) for c in self.containers)]) + "\n", ""
        return self.rc, self.out, ""

    def triton_calls(self) -> list[dict]:
        return [c for c in self.calls if not c["command"].startswith(("cat ", "ids=$(docker ps ", STATE_FILES))]

    def close(self):
        self.closed = True


def test_triton_is_asked_at_the_clients_address_then_loopback_with_the_header_on_stdin():
    session = _Canned()
    health.ask_triton(session, "10.0.0.5", "8000", "k: v")
    (call,) = session.calls
    assert call["stdin"] == "k: v" and call["root"] is False
    assert call["command"] == (
        "hdr=$(cat); for a in 10.0.0.5 127.0.0.1; do b=http://$a:8000/v2; "
        "curl -fsS -m 3 -o /dev/null $b/health/ready || continue; echo @ready; "
        "printf '%s' \"$hdr\" | curl -fsS -m 3 -X POST -H @- $b/repository/index; break; done")
    health.ask_triton(session, "fd00::1", "8010", "k: v")
    assert session.calls[-1]["command"].startswith("hdr=$(cat); for a in '[fd00::1]' 127.0.0.1; do "
                                                   "b=http://$a:8010/v2; ")
    health.ask_triton(session, "127.0.0.1", "8000", "k: v")
    assert session.calls[-1]["command"].startswith("hdr=$(cat); for a in 127.0.0.1; do ")


@pytest.mark.parametrize("out, answer", [
    ('@ready\n[{"name": "b", "state": "READY"}, {"name": "a", "state": "READY"}, {"name": "c"},'
     ' {"name": "d", "state": "LOADING"}]', (True, ["a", "b"])),
    ("@ready\n[]", (True, [])),
    ("@ready\n", (True, None)),
    ('@ready\n[{"state": "READY"}]', (True, None)),
    ("@ready\nnot json", (True, None)),
    ("", (False, None)),
    ('[{"name": "a", "state": "READY"}]', (False, ["a"])),
])
def test_what_tritons_answer_means(out, answer):
    assert health.ask_triton(_Canned(out), "h", "8000", "k: v") == answer


def _record(previous: dict | None) -> str:
    rec = {"name": "triton", "image": "tritonserver:2", "spec": "new", "run_args": [], "command": []}
    return json.dumps({**rec, "previous": previous and {**rec, **previous}})


def _previous(session) -> str:
    """The previous column of a server: what the reader reads, as the table shows it."""
    return status._previous(health.previous_record(session, "left"))


def test_the_previous_spec_is_read_as_root_from_the_servers_record():
    session = _Canned(record=_record({"image": "tritonserver:1", "spec": "old"}))
    record = health.previous_record(session, "left")
    assert (record.image, record.spec) == ("tritonserver:1", "old")
    assert status._previous(record) == "tritonserver:1 (spec old)"
    assert session.calls == [{"command": f"cat {hc.record_path('left')}", "stdin": None, "root": True}]
    assert health.previous_record(_Canned(record=_record(None)), "left") is None
    assert _previous(_Canned(record=_record(None))) == "-"
    assert _previous(_Canned(record=None)) == "-"
    assert _previous(_Canned(record="garbage")) == "-"
    failed = _Canned(record=_record({"image": "tritonserver:1", "spec": "old"}), record_rc=1)
    assert _previous(failed) == "-"  # a read that failed is not trusted, whatever it printed


def test_a_host_without_an_instance_type_or_with_a_bad_config_places_no_servers():
    assert health.expected_servers("h", {}) == {}
    assert health.expected_servers("h", {"instance_type": "inf2.24xlarge", "triton_servers": "nonsense"}) == {}


def test_a_row_without_a_container_says_why_and_where_clients_would_go():
    s = health.ServerHealth("h1", "left", "8010", None, "x" * 100, True, None)
    row = status.server_row({"ssh_hostname": "10.0.0.5"}, s)
    assert row == {"host": "h1", "server": "left", "image": "?", "devices": "?", "cores": "-",
                   "state": f"docker not answering ({'x' * 60})", "uptime": "-", "models": "?", "ready_models": "-",
                   "endpoint": "http://10.0.0.5:8010", "serving": True}
    row = status.server_row({}, health.ServerHealth("h1", "left", "8010", None, None, False, ["b", "a"]))
    assert row["state"] == "missing (expected left)" and row["endpoint"] == "http://h1:8010"
    assert row["ready_models"] == "b, a" and row["serving"] is False


def _summary(**over) -> dict:
    c = {"image": "tritonserver:1", "devices": [], "labels": {hc.LABEL_ENDPOINT: "0.0.0.0:8000"},
         "restarting": False, "status": "running", "restart_count": 0, "started_at": "", "running": True}
    return {**c, **over}


def _row(c: dict, ready: bool, models: list[str] | None) -> dict:
    return status.server_row({"ssh_hostname": "a"}, health.ServerHealth("h1", "t", "8000", c, None, ready, models))


def test_devices_and_cores_come_from_the_container_or_its_labels():
    row = _row(_summary(devices=["/dev/neuron0", "/dev/neuron1"]), True, ["m"])
    assert row["devices"] == "neuron0,neuron1" and row["cores"] == "-" and row["state"] == "running"
    labels = {hc.LABEL_ENDPOINT: "0.0.0.0:8000", hc.LABEL_DEVICES: "0,1", hc.LABEL_CORES: "0-3"}
    row = _row(_summary(labels=labels), True, ["m"])
    assert row["devices"] == "0,1" and row["cores"] == "0-3" and row["endpoint"] == "http://a:8000"
    row = _row(_summary(restart_count=2), True, None)
    assert row["devices"] == "-" and row["state"] == "running (2 restarts)" and row["uptime"] == "-"
    assert row["serving"] is True and row["ready_models"] == "-"


def _placed(name: str, port: int, models: tuple[str, ...] | None = None):
    """A placement as :func:`tritonfleet.access.health.placements` gives it (what read_host reads of it)."""
    from types import SimpleNamespace

    return SimpleNamespace(name=name, http_port=port, models=models)


def test_host_status_sends_the_repository_header_and_asks_the_default_port(monkeypatch):
    session = _Canned('@ready\n[{"name": "m", "state": "READY"}]', record=_record({"image": "i:0", "spec": "s0"}))
    connected = []
    monkeypatch.setattr(health, "connect", lambda name, data: connected.append(name) or session)
    monkeypatch.setattr(health, "placements", lambda name, data: {"left": _placed("left", 8010),
                                                                  "right": _placed("right", 8020)})
    rows = status.host_status("h1", {"triton_repository_secret": "sec"}, previous=True)
    assert session.closed
    assert [(r["server"], r["endpoint"], r["previous"], r["state"]) for r in rows] == [
        ("left", "http://h1:8010", "i:0 (spec s0)", "docker not answering (docker exited with status 1)"),
        ("right", "http://h1:8020", "i:0 (spec s0)", "docker not answering (docker exited with status 1)")]
    assert connected == ["h1"]
    assert [c["command"] for c in session.calls if c["command"].startswith("cat ")] == [
        f"cat {hc.record_path('left')}", f"cat {hc.record_path('right')}"]
    # the watchdog's and pull mode's state files: one command, as root, the watchdog's first
    (states,) = [c for c in session.calls if c["command"].startswith(STATE_FILES)]
    assert states["root"] is True and states["stdin"] is None
    assert states["command"] == (f"printf '\\n@@file\\n'; cat {watchrun.STATE_FILE} 2>/dev/null || true; "
                                 f"printf '\\n@@file\\n'; cat {hc.PULL_STATE_FILE} 2>/dev/null || true")
    assert "watchdog" not in rows[0] and "release" not in rows[0]  # neither file on the host
    asked = session.triton_calls()
    assert [c["stdin"] for c in asked] == ["x-tritonfleet-repository-key: sec"] * 2
    assert "for a in 127.0.0.1; do b=http://$a:8010/v2;" in asked[0]["command"]
    assert "for a in 127.0.0.1; do b=http://$a:8020/v2;" in asked[1]["command"]
    session.calls.clear()
    rows = status.host_status("h1", {"triton_repository_header": "x-key"})
    assert "previous" not in rows[0] and [c["stdin"] for c in session.triton_calls()] == ["x-key: "] * 2


def test_fleet_status_gives_every_hosts_rows_and_the_exporters_column(monkeypatch, tmp_path):
    from tritonfleet.face import monitoring

    inv = tmp_path / "inv.py"
    inv.write_text("hosts = [('a', {'ssh_hostname': '10.0.0.1'}), ('b', {'ssh_hostname': '10.0.0.2'})]\n")
    asked = []

    def host_status(name, data, *, previous=False):
        asked.append((name, previous))
        return [{"host": name, "server": s} for s in ("x", "y")]

    monkeypatch.setattr(status, "host_status", host_status)
    rows = status.fleet_status(inv, previous=True)
    assert rows == [{"host": h, "server": s} for h in "ab" for s in "xy"]
    assert sorted(asked) == [("a", True), ("b", True)]
    seen = []
    monkeypatch.setattr(monitoring, "exporters_status",
                        lambda inventory, prometheus: seen.append((inventory, prometheus)) or {"a": {"node": True}})
    rows = status.fleet_status(inv, exporters=True, prometheus="http://prom:9090")
    assert seen == [(inv, "http://prom:9090")]
    assert [r["exporters"] for r in rows] == ["node up", "node up", "-", "-"]

    def down(inventory, prometheus):
        raise OSError("connection refused " + "z" * 80 + "\nmore")

    monkeypatch.setattr(monitoring, "exporters_status", down)
    rows = status.fleet_status(inv, exporters=True)
    assert {r["exporters"] for r in rows} == {"prometheus: " + ("connection refused " + "z" * 80)[:60]}
    assert "exporters" not in status.fleet_status(inv)[0]
    asked.clear()
    status.fleet_status(inv)
    assert sorted(asked) == [("a", False), ("b", False)]  # no previous unless asked


def test_the_printed_table_has_a_column_per_field_and_error_rows_in_red(capsys):
    row = {"host": "h1", "server": "t", "image": "i:1", "devices": "neuron0", "cores": "0-1", "state": "running",
           "uptime": "1h00m", "models": "m, n (not ready: n)", "ready_models": "m", "endpoint": "http://a:8000",
           "previous": "i:0 (spec s)",
           "exporters": "node up"}
    status.print_status([row, {"host": "h2", "error": "ssh: timed out"}], previous=True)
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert lines[0].strip() == "tritonfleet status"
    head = [c.strip() for c in lines[2].strip("┃").split("┃")]
    assert head == ["host", "server", "image", "devices", "cores", "state", "uptime", "models", "ready models",
                    "endpoint", "previous", "exporters"]
    cells = [c.strip() for c in lines[4].strip("│").split("│")]
    assert cells == ["h1", "t", "i:1", "neuron0", "0-1", "running", "1h00m", "m, n (not ready: n)", "m",
                     "http://a:8000", "i:0 (spec s)", "node up"]
    cells = [c.strip() for c in lines[5].strip("│").split("│")]
    assert cells == ["h2", "ssh: timed out"] + [""] * 10
    status.print_status([{k: v for k, v in row.items() if k not in ("previous", "exporters")}])
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert [c.strip() for c in lines[2].strip("┃").split("┃")] == head[:10]
    assert len(lines[0]) < 200 and len(lines[2]) < 200  # not wider than its cells (no terminal: 200 at most)
    status.print_status([])
    assert "tritonfleet status" in capsys.readouterr().out


def test_containers_are_keyed_by_their_server_label_and_asked_where_they_listen(monkeypatch):
    from test_status_cli import _container

    named = _container("left", "running", ":::8010")
    named["Name"] = "/tritonfleet-left-1"  # the container's own name is not the server's
    bare = _container("right", "running")
    del bare["Config"]["Labels"]["com.tritonfleet.endpoint"]  # no endpoint label, not placed: Triton's 8000
    session = _Canned('@ready\n[{"name": "m", "state": "READY"}]', containers=[named, bare])
    monkeypatch.setattr(health, "connect", lambda name, data: session)
    rows = status.host_status("h1", {"ssh_hostname": "10.0.0.5"})
    assert [(r["server"], r["endpoint"], r["ready_models"]) for r in rows] == [
        ("left", "http://10.0.0.5:8010", "m"), ("right", "-", "m")]
    commands = [c["command"] for c in session.triton_calls()]
    assert commands[0].startswith("hdr=$(cat); for a in 10.0.0.5 127.0.0.1; do b=http://$a:8010/v2; ")
    assert commands[1].startswith("hdr=$(cat); for a in 10.0.0.5 127.0.0.1; do b=http://$a:8000/v2; ")


def _wide_row() -> dict:
    return {"host": "h1", "server": "t", "image": "i" * 150, "devices": "d", "cores": "c", "state": "s" * 150,
            "uptime": "u", "models": "m", "ready_models": "m", "endpoint": "e"}


def test_the_table_fits_a_terminal_and_is_200_columns_at_most_elsewhere(monkeypatch, capsys):
    status.print_status([_wide_row()])
    widths = {len(line) for line in capsys.readouterr().out.splitlines() if line.startswith(("┏", "│"))}
    assert widths == {200}
    monkeypatch.setenv("COLUMNS", "70")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    status.print_status([_wide_row()])
    widths = {len(line) for line in capsys.readouterr().out.splitlines() if line.startswith(("┏", "│"))}
    assert widths == {70}


@pytest.mark.parametrize("prometheus, where", [("http://prom:9090", "http://prom:9090"), (None, "probing from here")])
def test_a_prometheus_that_does_not_answer_is_said_at_debug_level_with_where_it_was_asked(monkeypatch, tmp_path,
                                                                                          caplog, prometheus, where):
    """`tritonfleet -v status --exporters` says why the exporters column reads "prometheus: ...": which Prometheus
    (or the probes from this machine) and the whole error."""
    import logging

    from tritonfleet.face import monitoring

    inv = tmp_path / "inv.py"
    inv.write_text("hosts = [('a', {'ssh_hostname': '10.0.0.1'})]\n")
    monkeypatch.setattr(status, "host_status", lambda name, data, *, previous=False: [{"host": name}])

    def down(inventory, prometheus):
        raise OSError("connection refused")

    monkeypatch.setattr(monitoring, "exporters_status", down)
    with caplog.at_level(logging.DEBUG, logger="tritonfleet.face.status"):
        status.fleet_status(inv, exporters=True, prometheus=prometheus)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name == "tritonfleet.face.status"] == [
        ("tritonfleet.face.status", logging.DEBUG, f"exporters: {where}: connection refused")]
