"""``tritonfleet status``'s release column (tritonfleet/face/status.py): what a host's pull state
(``tritonfleet-agent pull``'s state file, tritonfleet.hostcontract.PULL_STATE_FILE) says, the rows and the printed
table; and :func:`tritonfleet.access.health.served_releases`, which a release rollout polls."""

from __future__ import annotations

import pytest
from test_status_watchdog import _server

from tritonfleet.access.health import HostHealth
from tritonfleet.face import status

NOW = 1_800_000_000.0


def _pull(**over) -> dict:
    return {"release": "v2", "source": "s3://b/p/v2/", "pointer": "RELEASE", "pointed": "v2", "version": "000003-x",
            "last_check": NOW - 3, "last_change": NOW - 900, "last_error": None, "failures": 0,
            "next_check": NOW - 1, "interval": 2.0, "pid": 1234, "updated": NOW - 3, **over}


ERROR = "AccessDenied: User: arn:aws:sts::123456789012:assumed-role/fleet/i-0abc is not authorized to perform"


@pytest.mark.parametrize("state, want", [
    (None, "-"),  # the host does not pull
    ({}, "-"),
    (_pull(), "v2 (checked 3s ago)"),
    (_pull(last_check=NOW - 75.5, interval=10.0), "v2 (checked 1m15s ago)"),
    (_pull(pointed="v3"), "v2 -> v3 syncing"),
    (_pull(pointed="v3", failures=4, last_error=ERROR + "\nsecond line"),
     "v2 -> v3 failing x4: " + ERROR[:57] + "..."),  # the first line, 60 characters at most
    (_pull(pointed="v3", failures=1, last_error="x" * 60), "v2 -> v3 failing x1: " + "x" * 60),  # 60: as it is
    (_pull(pointed="v3", failures=1, last_error="x" * 61), "v2 -> v3 failing x1: " + "x" * 57 + "..."),
    (_pull(pointed="v3", failures=2, last_error=None), "v2 -> v3 failing x2: ?"),
    (_pull(failures=3, last_error="pointer: timed out"), "v2 (failing x3: pointer: timed out)"),  # can't look
    (_pull(release=None, pointed=None, source=None, version=None), "none yet"),
    (_pull(release=None, pointed="v1"), "none yet -> v1 syncing"),
    (_pull(release=None, pointed="v1", failures=5, last_error="no such key"), "none yet -> v1 failing x5: no such key"),
    (_pull(release=None, pointed=None, failures=1, last_error="NoSuchKey: RELEASE"),
     "none yet (failing x1: NoSuchKey: RELEASE)"),
    (_pull(last_check=NOW - 600), "stale (last check 10m00s ago; serving v2)"),
    (_pull(last_check=NOW - 600, release=None), "stale (last check 10m00s ago)"),
    (_pull(last_check=NOW - 600, pointed="v3", failures=9, last_error="e"), "stale (last check 10m00s ago; serving v2)"),
    (_pull(last_check=None), "stale (no check yet; serving v2)"),
    (_pull(last_check="garbage", interval="garbage"), "stale (no check yet; serving v2)"),
    (_pull(last_check=float("nan")), "stale (no check yet; serving v2)"),  # what no agent writes: no crash
    (_pull(pointed="v3", failures=float("inf"), last_error="e"), "v2 -> v3 syncing"),
    (_pull(failures="2", interval=float("inf"), last_error="e"), "v2 (failing x2: e)"),
])
def test_the_release_cell(state, want):
    assert status.release_cell(state, NOW) == want


@pytest.mark.parametrize("interval, fresh, stale", [
    (2.0, 60, 60.5),  # 10 intervals are 20 s: a minute at least
    (5.0, 60, 61),  # 50 s: still the minute
    (6.0, 60, 61),  # 10 intervals are the minute
    (10.0, 100, 100.5),  # 10 intervals
    (30.0, 300, 301),
    (None, 60, 61),  # no interval said: the agent's default (2 s)
    (0, 60, 61),
])
def test_a_pull_state_is_stale_past_ten_intervals_and_a_minute_at_least(interval, fresh, stale):
    assert status.release_cell(_pull(last_check=NOW - fresh, interval=interval), NOW).startswith("v2 (checked ")
    assert status.release_cell(_pull(last_check=NOW - stale, interval=interval), NOW).startswith(
        "stale (last check ")


def test_a_clock_behind_the_hosts_says_checked_0s_ago():
    assert status.release_cell(_pull(last_check=NOW + 5), NOW) == "v2 (checked 0s ago)"


def test_rows_get_the_column_only_from_hosts_that_pull(monkeypatch, capsys):
    monkeypatch.setattr(status.time, "time", lambda: NOW)
    pulling = HostHealth("h1", [_server("triton-0"), _server("triton-1")], pull=_pull(pointed="v3"))
    rows = status.host_rows({"ssh_hostname": "10.0.0.1"}, pulling)
    assert [r["release"] for r in rows] == ["v2 -> v3 syncing"] * 2  # the host's, on each of its servers
    (plain,) = status.host_rows({"ssh_hostname": "10.0.0.2"}, HostHealth("h2", [_server("triton")]))
    assert "release" not in plain
    (down,) = status.host_rows({}, HostHealth("h3", unreachable="ssh: timed out", pull=_pull()))
    assert "release" not in down  # an error row says the error
    status.print_status([plain, *rows])
    out = capsys.readouterr().out
    head = [c.strip() for c in out.splitlines()[2].strip("┃").split("┃")]
    assert head[-1] == "release" and "v2 -> v3 syncing" in out
    status.print_status([plain])
    assert "release" not in capsys.readouterr().out


def test_host_status_asks_for_the_pull_state(monkeypatch):
    asked = []

    def read_host(name, data, **kwargs):
        asked.append(kwargs)
        return HostHealth(name, [_server("triton")], pull=_pull())

    monkeypatch.setattr(status, "read_host", read_host)
    monkeypatch.setattr(status.time, "time", lambda: NOW)
    (row,) = status.host_status("h1", {"ssh_hostname": "10.0.0.1"})
    assert row["release"] == "v2 (checked 3s ago)"
    assert asked == [{"previous": False, "watchdog": True, "pull": True}]


def test_served_releases_gives_each_triton_hosts_pull_state(monkeypatch, tmp_path):
    from tritonfleet.access import health

    inv = tmp_path / "inv.py"
    inv.write_text("hosts = [('a', {'ssh_hostname': '10.0.0.1'}), ('b', {'ssh_hostname': '10.0.0.2'}),"
                   " ('c', {'ssh_hostname': '10.0.0.3'})]\n"
                   "lb = [('lb1', {'ssh_hostname': '10.0.0.9', 'instance_type': 'c6i.large'})]\n")
    asked = []

    class Session:
        def __init__(self, name):
            self.name = name

        def close(self):
            pass

    def connect(name, data):
        asked.append(name)
        if name == "c":
            raise health.HostUnreachable("ssh: timed out")
        return Session(name)

    monkeypatch.setattr(health, "connect", connect)
    monkeypatch.setattr(health, "pull_state", lambda session: _pull(release="a") if session.name == "a" else None)
    assert health.served_releases(str(inv)) == {"a": _pull(release="a"), "b": None, "c": None}
    assert sorted(asked) == list("abc")  # not the load balancer
