"""``tritonfleet status``'s watchdog column (tritonfleet/face/status.py): what a host's watchdog state file
(tritonfleet/agent/watchrun.py's format) says about each server, the rows and the printed table."""

from __future__ import annotations

import pytest
from test_status_cli import _container

from tritonfleet import hostcontract as hc
from tritonfleet.access.health import HostHealth, ServerHealth
from tritonfleet.face import status

NOW = 1_800_000_000.0


def _state(*actions, at=NOW - 10, interval=30):
    return {"schema": 1, "at": at, "interval": interval, "servers": {}, "host": {},
            "actions": [{"at": when, "kind": kind, "server": server, "reason": reason, "detail": "...",
                         "outcome": outcome} for when, kind, server, reason, outcome in actions]}


@pytest.mark.parametrize("state, server, want", [
    (None, "triton", "-"),  # no watchdog on the host
    (_state(), "triton", "watching"),
    (_state(at=NOW - 121), "triton", "stale: last look 2m01s ago"),  # more than 3 intervals + 30 s
    (_state(at=NOW - 120), "triton", "watching"),
    (_state((NOW - 300, "restart", "triton", "crash_loop", "done")), "triton",
     "1 in 1h, last: restart for crash_loop 5m00s ago"),
    (_state((NOW - 300, "restart", "triton-1", "leak", "done")), "triton-0", "watching"),  # another server's
    (_state((NOW - 3601, "restart", "triton", "leak", "done")), "triton", "watching"),  # older than an hour
    (_state((NOW - 900, "restart", "triton", "leak", "done"), (NOW - 60, "replace", None, "neuron_hw_error",
                                                               "failed: AccessDenied")), "triton",
     "2 in 1h, last: replace for neuron_hw_error (failed) 1m00s ago"),  # the host's own, failed
])
def test_the_watchdog_cell(state, server, want):
    assert status.watchdog_cell(state, server, NOW) == want


def _server(name: str) -> ServerHealth:
    container = hc.container_summary(_container(name, "running"))  # as Docker's inspect gives it
    return ServerHealth("h1", name, "8000", container, None, True, ["add_sub"], None, placed=True, loads=None)


def test_rows_get_the_column_only_from_hosts_with_a_watchdog(monkeypatch, capsys):
    monkeypatch.setattr(status.time, "time", lambda: NOW)
    watched = HostHealth("h1", [_server("triton")], watchdog=_state((NOW - 5, "report", None, "foreign_cores",
                                                                     "done")))
    (row,) = status.host_rows({"ssh_hostname": "10.0.0.1"}, watched)
    assert row["watchdog"] == "1 in 1h, last: report for foreign_cores 5s ago"
    (plain,) = status.host_rows({"ssh_hostname": "10.0.0.2"}, HostHealth("h2", [_server("triton")]))
    assert "watchdog" not in plain
    status.print_status([row, plain])
    out = capsys.readouterr().out
    assert "watchdog" in out and "foreign_cores" in out
    status.print_status([plain])
    assert "watchdog" not in capsys.readouterr().out
