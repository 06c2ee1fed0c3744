"""tritonfleet.fleet.rollout and its runner (tritonfleet.fleet.runner), the parts the rollout tests replace or
never reach: the reports lock's file and message, whether a pid still runs (zombies included), the lines of a
failed pyinfra run kept as its reason, the rollback point's reading, the wait for a host to serve again, a step
that cannot start and an interrupted rollout. Written for the mutants ``make mutate`` found surviving
(docs/mutation-survivors.md)."""

from __future__ import annotations

import calendar
import json
import logging
import os
import re
import shutil
import subprocess
import time

import pytest

from tritonfleet.access import health
from tritonfleet.fleet import rollout as ro
from tritonfleet.fleet import runner as rn


@pytest.fixture
def said(caplog):
    """The rollout's progress lines (its logger's INFO records, which the command line shows on stderr), as a
    function giving those logged so far."""
    caplog.set_level(logging.INFO, logger=ro.logger.name)
    return lambda: [r.getMessage() for r in caplog.records if r.name == ro.logger.name and r.levelno == logging.INFO]


# -- the reports lock ------------------------------------------------------------------------------------------


def held_by_another(path, content: bytes):
    """The lock file holding ``content``, flocked through a descriptor of its own (another rollout)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_the_lock_is_a_private_file_in_a_reports_directory_made_with_its_parents(tmp_path):
    reports = tmp_path / "a" / "b" / "reports"
    with ro.ReportsLock(str(reports)):
        lock = reports / ".rollout.lock"
        assert lock.is_file() and lock.stat().st_mode & 0o777 == 0o600


def test_the_lock_names_its_holder_with_the_utc_time_it_was_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "UTC-05:30")  # local time 5.5 hours off UTC: the stamp must still be UTC
    time.tzset()
    try:
        (tmp_path / ".rollout.lock").write_text("x" * 300)  # what an earlier holder left: replaced
        with ro.ReportsLock(str(tmp_path)):
            text = (tmp_path / ".rollout.lock").read_text()
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    m = re.fullmatch(rf"pid {os.getpid()}, since (\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ)", text)
    assert m, text
    taken = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(taken - time.time()) < 120


@pytest.mark.parametrize("content, holder", [
    (b"", "unknown"),
    (b"pid 7, since then\n", "pid 7, since then"),
    (b"pid \xff\xfe 7", "pid \ufffd\ufffd 7"),
    (b"x" * 300, "x" * 200),
])
def test_a_second_rollout_names_the_first_in_one_line(tmp_path, content, holder):
    fd = held_by_another(tmp_path / ".rollout.lock", content)
    try:
        with pytest.raises(ro.RolloutError) as caught:
            with ro.ReportsLock(str(tmp_path)):
                pass
    finally:
        os.close(fd)
    assert str(caught.value) == (f"another rollout is running against {tmp_path}/ ({holder}); wait for it or "
                                 "use another --reports directory")


def test_leaving_a_lock_that_was_never_taken_is_no_error(tmp_path):
    lock = ro.ReportsLock(str(tmp_path))
    assert lock.fd is None
    lock.__exit__(None, None, None)


# -- is a pid still running ------------------------------------------------------------------------------------


def test_a_running_process_is_alive_and_left_running():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert rn._alive(proc.pid)
        with pytest.raises(subprocess.TimeoutExpired):  # only asked: not signalled
            proc.wait(timeout=0.5)
    finally:
        proc.kill()
        proc.wait()


def zombie(tmp_path, name: str) -> subprocess.Popen:
    """A child that has exited and is not reaped yet, its command name ``name``."""
    exe = tmp_path / name
    shutil.copy("/bin/true", exe)
    proc = subprocess.Popen([str(exe)])
    for _ in range(500):
        with open(f"/proc/{proc.pid}/stat") as f:
            if f.read().rsplit(")", 1)[-1].split()[0] == "Z":
                return proc
        time.sleep(0.01)
    raise AssertionError("the child never became a zombie")


@pytest.mark.parametrize("name", ["plain", "a) b"])  # a ")" in the name: the state is after the last one
def test_a_zombie_is_not_running(tmp_path, name):
    proc = zombie(tmp_path, name)
    try:
        assert rn._alive(proc.pid) is False
    finally:
        proc.wait()


def test_a_pid_of_another_user_counts_as_running(monkeypatch):
    def kill(pid, sig):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(rn.os, "kill", kill)
    assert rn._alive(12345) is True


def test_a_pid_whose_proc_entry_cannot_be_read_is_not_running(monkeypatch):
    def unreadable(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(rn, "open", unreadable, raising=False)
    assert rn._alive(os.getpid()) is False


# -- why a pyinfra run failed ----------------------------------------------------------------------------------


def test_the_reason_is_the_last_four_error_lines_of_the_run():
    output = ("noise 1\n  ERROR disk full  \nnoise 2\nError: no route\nstep failed\nnoise 3\nQA failed on h1\n"
              "ERROR last\n\n")
    assert rn._reason(output) == "Error: no route | step failed | QA failed on h1 | ERROR last"


def test_a_run_without_error_lines_gives_its_last_four_lines():
    assert rn._reason("a\n\nb\nc\nd\ne\n") == "b | c | d | e"


def test_the_reason_is_at_most_600_characters():
    assert rn._reason("ERROR " + "x" * 1000) == ("ERROR " + "x" * 1000)[:600]


def test_one_lines_and_joins():
    assert ro._one_line(TimeoutError()) == "TimeoutError"
    assert ro._one_line(OSError("a\n  b " + "c" * 700)) == ("a b " + "c" * 700)[:600]
    assert ro._join("", "second") == "second"
    assert ro._join("first", "second") == "first | second"
    assert ro._join("f" * 400, "s" * 400) == ("f" * 400 + " | " + "s" * 400)[:600]


# -- the rollback point ----------------------------------------------------------------------------------------


def fake_session(monkeypatch, rc: int, out: str, err: str = ""):
    from tritonfleet.access import ssh

    seen = []

    class Session:
        def run(self, command, root=False):
            return rc, out, err

        def close(self):
            pass

    def connect(name, data):
        seen.append((name, data))
        return Session()

    monkeypatch.setattr(ssh, "connect", connect)
    return seen


def test_the_point_connects_to_the_host_with_its_data(monkeypatch):
    seen = fake_session(monkeypatch, 0, "@@models\n")
    data = {"ssh_hostname": "10.0.0.1"}
    assert ro.rollback_point("h1", data) == {"servers": {}, "models_version": None}
    assert seen == [("h1", data)]


def test_a_single_record_and_an_absolute_or_bare_current_link(monkeypatch):
    from tritonfleet import hostcontract as hc

    record = hc.ServerRecord(name="triton", image="img:1", spec="spec-a", run_args=[], command=["tritonserver"])
    fake_session(monkeypatch, 0, f"@@record\n{record.to_json()}\n@@models\n/opt/m/versions/v7\n")
    assert ro.rollback_point("h1", {}) == {"servers": {"triton": "spec-a"}, "models_version": "v7"}
    fake_session(monkeypatch, 0, "@@models\nv8\n")
    assert ro.rollback_point("h1", {})["models_version"] == "v8"


def test_a_long_error_reading_the_point_is_cut_to_200_characters(monkeypatch):
    fake_session(monkeypatch, 1, "", "e" * 300)
    with pytest.raises(ro.RolloutError) as caught:
        ro.rollback_point("h1", {})
    assert str(caught.value) == "h1: cannot read its host records: " + "e" * 200


# -- waiting for a host to serve again -------------------------------------------------------------------------


class Clock:
    def __init__(self, tick: float) -> None:
        self.now, self.tick, self.slept = 0.0, tick, []

    def monotonic(self) -> float:  # each reading costs ``tick`` seconds
        self.now += self.tick
        return self.now - self.tick

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def fake_status(monkeypatch, answers, tick: float = 0.0):
    """The health reader answering ``answers`` in turn (the last one for ever); the clock moves in sleeps and by
    ``tick`` at each reading."""
    clock = Clock(tick)
    asked = []

    def read_host(name, data):
        asked.append((name, data))
        return answers[min(len(asked), len(answers)) - 1]

    monkeypatch.setattr(health, "read_host", read_host)
    monkeypatch.setattr(ro.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(ro.time, "sleep", clock.sleep)
    return clock, asked


def server(name: str = "triton", status: str = "running", ready: bool = True, models=("m1",)) -> health.ServerHealth:
    container = {"image": "i:1", "status": status, "restarting": status == "restarting", "restart_count": 0,
                 "running": status in ("running", "restarting"), "started_at": "", "devices": [], "labels": {}}
    return health.ServerHealth("h1", name, "8000", container, None, ready, list(models) if models else None)


DOWN = health.HostHealth("h1", [server(status="exited", ready=False, models=None)])
UP = health.HostHealth("h1", [server()])


def test_a_host_serving_at_once_is_back_without_waiting(monkeypatch):
    clock, asked = fake_status(monkeypatch, [UP])
    data = {"ssh_hostname": "10.0.0.1"}
    assert ro.serving("h1", data) == (True, "")
    assert asked == [("h1", data)] and clock.slept == []


def test_a_host_serving_at_the_second_look_is_back_after_one_1s_pause(monkeypatch):
    clock, asked = fake_status(monkeypatch, [DOWN, UP])
    assert ro.serving("h1", {}) == (True, "")
    assert clock.slept == [1] and len(asked) == 2


def test_a_host_that_never_serves_is_given_120s_by_default(monkeypatch):
    clock, asked = fake_status(monkeypatch, [DOWN], tick=1)
    assert ro.serving("h1", {}) == (False, "triton: exited, ready: not answering")
    assert len(asked) == 61 and set(clock.slept) == {1}  # deadline read at 0; looks end at 1, 3, ... 121


def test_the_look_at_the_deadline_itself_is_not_the_last(monkeypatch):
    clock, asked = fake_status(monkeypatch, [DOWN])
    assert ro.serving("h1", {}, timeout=2)[0] is False
    assert len(asked) == 4  # at 0, 1, 2 (not past it yet) and 3


def test_what_the_last_look_saw_is_said_server_by_server(monkeypatch):
    fake_status(monkeypatch, [health.HostHealth("h1", [server("a", "restarting"), server("b")])])
    assert ro.serving("h1", {}, timeout=0) == (False, "a: restarting, ready: m1; b: running, ready: m1")
    fake_status(monkeypatch, [health.HostHealth("h1", [server("a", "exited", ready=False, models=None),
                                                       server("b", models=None)])])
    assert ro.serving("h1", {}, timeout=0) == (False, "a: exited, ready: not answering; b: running, ready: -")
    fake_status(monkeypatch, [health.HostHealth("h1", unreachable="ssh: unreachable")])
    assert ro.serving("h1", {}, timeout=0) == (False, "ssh: unreachable")
    fake_status(monkeypatch, [health.HostHealth("h1")])
    assert ro.serving("h1", {}, timeout=0) == (False, "no Triton servers")
    fake_status(monkeypatch, [health.HostHealth("h1", docker_error="permission denied")])
    assert ro.serving("h1", {}, timeout=0) == (False, "no Triton servers (docker: permission denied)")


# -- a step that cannot start, an unhealthy put back, an interrupt ---------------------------------------------


def rollout_of(monkeypatch, tmp_path, run, hosts=("h1",), canary=1, batch=1, lb=None):
    monkeypatch.setattr(ro, "rollback_point", lambda name, data: {"servers": {}, "models_version": None})
    monkeypatch.setattr(ro, "serving", lambda name, data: (True, ""))
    monkeypatch.setattr(ro.Runner, "run", run)
    opts = ro.Options(inventory="inv.py", canary=canary, batch=batch, fail_percent=100, reports_dir=str(tmp_path))
    return ro.Rollout(opts, [(h, {}) for h in hosts], lb)


def test_a_step_that_cannot_even_start_fails_the_host_with_the_reason(monkeypatch, tmp_path):
    def run(self, deploy, host, data=None):
        raise FileNotFoundError(2, "No such file or directory: 'pyinfra'")

    rollout = rollout_of(monkeypatch, tmp_path, run)
    (h1,) = rollout.run()["hosts"]
    assert (h1["status"], h1["failed_step"]) == ("rollback failed", "serve")
    assert h1["message"] == ("[Errno 2] No such file or directory: 'pyinfra' | rollback: [Errno 2] No such file or "
                             "directory: 'pyinfra'")


def test_a_host_not_healthy_again_is_said_with_the_reason(monkeypatch, tmp_path, said):
    class LB:
        def take_out(self, name, data):
            pass

        def put_back(self, name, data):
            raise ro.RolloutError("target i-1 not healthy after 600s")

    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None: (True, ""), lb=LB())
    rollout.run()
    assert "h1: not healthy in the load balancer: target i-1 not healthy after 600s" in said()


def test_an_interrupt_lets_the_batch_in_flight_finish_and_starts_no_other(monkeypatch, tmp_path, said):
    holder = {}

    def run(self, deploy, host, data=None):
        if host == "h1":
            ro._interrupt(holder["rollout"])
        return True, ""

    rollout = rollout_of(monkeypatch, tmp_path, run, hosts=("h1", "h2", "h3"))
    holder.update(rollout=rollout)
    report = rollout.run()
    assert report["stopped"] == "interrupted"
    assert [h["status"] for h in report["hosts"]] == ["updated", "not started", "not started"]
    assert "interrupted: the hosts in flight finish their steps; no new batch starts" in said()


def test_a_lock_left_twice_is_left_once(tmp_path):
    lock = ro.ReportsLock(str(tmp_path))
    with lock:
        pass
    lock.__exit__(None, None, None)
    assert lock.fd is None


# -- the report file and the summary ---------------------------------------------------------------------------


def test_the_report_is_indented_json_named_by_its_utc_time(tmp_path, monkeypatch):
    report = {"stopped": None, "hosts": [{"host": "h1"}]}
    monkeypatch.setenv("TZ", "UTC-05:30")
    time.tzset()
    try:
        path = ro.write_report(report, str(tmp_path / "a" / "reports"))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert path.parent == tmp_path / "a" / "reports"
    assert path.read_text() == json.dumps(report, indent=2) + "\n"
    m = re.fullmatch(r"rollout-(\d{8}T\d{6}Z)\.json", path.name)
    assert m, path.name
    assert abs(calendar.timegm(time.strptime(m.group(1), "%Y%m%dT%H%M%SZ")) - time.time()) < 120


def host_row(host, status, batch=1, failed_step=None, message="", seconds=12.4):
    return {"host": host, "status": status, "batch": batch, "failed_step": failed_step, "message": message,
            "seconds": seconds}


REPORT = {"stopped": "1 of 3 hosts failed", "hosts": [
    host_row("h1", "updated"),
    host_row("h2", "rolled back", failed_step="qa", message="m" * 130),
    host_row("h3", "not started", batch=0, seconds=0)]}


def summary(capsys, report=REPORT) -> list[str]:
    ro.print_summary(report)
    return capsys.readouterr().out.splitlines()


def test_the_summary_has_a_row_per_host_under_its_title_and_columns(capsys):
    lines = summary(capsys)
    assert lines[0].startswith("rollout")  # the title, on the left
    header = next(line for line in lines if "host" in line)
    assert re.search(r"host\s*┃\s*batch\s*┃\s*status\s*┃\s*failed step\s*┃\s*seconds\s*┃\s*why", header)
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    assert cells == [["h1", "1", "updated", "-", "12", ""],
                     ["h2", "1", "rolled back", "qa", "12", "m" * 120],
                     ["h3", "-", "not started", "-", "0", ""]]
    assert lines[-1] == "stopped: 1 of 3 hosts failed"


def test_the_summary_is_200_columns_wide_when_not_on_a_terminal(capsys):
    report = {"stopped": None, "hosts": [host_row("h" * 100, "rolled back", message="m" * 130)]}
    assert max(len(line) for line in summary(capsys, report)) == 200


def test_on_a_terminal_the_summary_takes_the_terminal_width(monkeypatch):
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setenv("COLUMNS", "90")
    ro.print_summary({"stopped": None, "hosts": [host_row("h" * 100, "rolled back", message="m" * 130)]})
    assert max(len(line) for line in re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).splitlines()) == 90


def test_failed_hosts_are_red_hosts_not_started_dim(monkeypatch, capsys):
    import rich.console

    class Colour(rich.console.Console):
        def __init__(self, **kwargs):
            super().__init__(force_terminal=True, color_system="standard", **kwargs)

    monkeypatch.setattr(rich.console, "Console", Colour)
    plain = {line: re.sub(r"\x1b\[[0-9;]*m", "", line) for line in summary(capsys)}
    rows = {text.split("│")[1].strip(): line for line, text in plain.items() if text.startswith("│")}
    assert "\x1b[31m" not in rows["h1"] and "\x1b[2m" not in rows["h1"]
    assert "\x1b[31m" in rows["h2"]
    assert "\x1b[2m" in rows["h3"] and "\x1b[31m" not in rows["h3"]


# -- main: the hosts it takes, the target group it builds ------------------------------------------------------


def main_with(monkeypatch, tmp_path, **options):
    from tritonfleet.access import inventory

    asked = []

    def load_inventory(path):
        asked.append(path)
        return [(f"h{i}", {}) for i in range(1, 4)]

    monkeypatch.setattr(inventory, "load_inventory_groups", lambda path, _read=load_inventory: (_read(path), {}))
    monkeypatch.setattr(ro, "rollback_point", lambda name, data: {"servers": {}, "models_version": None})
    monkeypatch.setattr(ro.Runner, "run", lambda self, deploy, host, data=None: (True, ""))
    monkeypatch.setattr(ro, "print_summary", lambda report: None)
    opts = ro.Options(inventory="inv.py", reports_dir=str(tmp_path), **options)
    rc = ro.main(opts)
    (path,) = tmp_path.glob("rollout-*.json")
    return rc, json.loads(path.read_text()), asked


def test_main_rolls_out_the_inventory_it_was_given(monkeypatch, tmp_path):
    rc, report, asked = main_with(monkeypatch, tmp_path)
    assert rc == 0 and asked == ["inv.py"] and [h["host"] for h in report["hosts"]] == ["h1", "h2", "h3"]


def test_limit_takes_only_the_hosts_named(monkeypatch, tmp_path):
    rc, report, _ = main_with(monkeypatch, tmp_path, limit=["h2"])
    assert rc == 0 and [h["host"] for h in report["hosts"]] == ["h2"]


def test_limit_naming_hosts_the_inventory_lacks_is_refused(monkeypatch, tmp_path):
    with pytest.raises(ro.RolloutError) as caught:
        main_with(monkeypatch, tmp_path, limit=["h9", "h2", "h7"])
    assert str(caught.value) == "--limit: not in inv.py: h7, h9"


def test_an_inventory_without_hosts_is_refused(monkeypatch, tmp_path):
    from tritonfleet.access import inventory

    monkeypatch.setattr(inventory, "load_inventory_groups", lambda path, _read=lambda path: []: (_read(path), {}))
    with pytest.raises(ro.RolloutError) as caught:
        ro.main(ro.Options(inventory="inv.py", reports_dir=str(tmp_path)))
    assert str(caught.value) == "inv.py: no hosts"


@pytest.mark.parametrize("timeouts, attempts", [({}, 120), (dict(lb_timeout=1, lb_delay=5), 1),
                                                (dict(lb_timeout=60, lb_delay=2), 30)])
def test_the_target_group_waits_in_the_region_by_the_delay_and_timeout_given(monkeypatch, tmp_path, timeouts,
                                                                            attempts):
    from tritonfleet.fleet import lb

    built = []

    class Group:
        def __init__(self, *args, **kwargs):
            built.append((args, kwargs))

        def check(self, hosts):
            pass

        def take_out(self, name, data):
            pass

        def put_back(self, name, data):
            pass

    monkeypatch.setattr(lb, "TargetGroup", Group)
    rc, _, _ = main_with(monkeypatch, tmp_path, target_group="arn:tg", region="eu-west-1", **timeouts)
    assert rc == 0
    assert built == [(("arn:tg", "eu-west-1"), {"delay": timeouts.get("lb_delay", 5), "attempts": attempts})]


# -- one host: the data it is given, the reasons it keeps, its time and line -----------------------------------


def test_every_step_of_a_host_gets_its_own_data_and_the_compact_point(monkeypatch, tmp_path, said):
    seen = []
    data = {"ssh_hostname": "10.0.0.1"}

    class LB:
        def take_out(self, name, got):
            seen.append(("take out", got))

        def put_back(self, name, got):
            seen.append(("put back", got))

    def run(self, deploy, host, extra=None):
        seen.append((deploy, extra))
        return deploy.endswith("rollback.py"), "serve on h1 failed"

    rollout = rollout_of(monkeypatch, tmp_path, run, lb=LB())
    rollout.hosts["h1"] = data
    monkeypatch.setattr(ro, "rollback_point", lambda name, got: seen.append(("point", got)) or
                        {"servers": {"triton": "spec-a"}, "models_version": None})
    monkeypatch.setattr(ro, "serving", lambda name, got: (seen.append(("serving", got)), (True, ""))[1])
    r = rollout.roll("h1", 1)
    assert r.status == "rolled back"
    assert seen == [("point", data), ("take out", data), ("deploys/serve.py", None),
                    ("deploys/rollback.py", {"rollback_point": '{"servers":{"triton":"spec-a"},"models_version":null}'}),
                    ("serving", data), ("put back", data)]
    assert "h1: serve failed, rolling back: serve on h1 failed" in said()


def test_a_host_that_cannot_leave_the_load_balancer_is_not_changed(monkeypatch, tmp_path):
    class LB:
        def take_out(self, name, data):
            raise ro.RolloutError("deregister:\n  AccessDenied")

        def put_back(self, name, data):
            pass

    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None: (True, ""), lb=LB())
    r = rollout.roll("h1", 1)
    assert (r.status, r.failed_step, r.message) == ("not changed", "take out", "deregister: AccessDenied")


def test_a_rollback_after_which_the_host_does_not_serve_says_what_it_saw(monkeypatch, tmp_path):
    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None:
                            (deploy.endswith("rollback.py"), "serve on h1 failed"))
    monkeypatch.setattr(ro, "serving", lambda name, data: (False, "triton: exited"))
    r = rollout.roll("h1", 1)
    assert r.status == "rollback failed"
    assert r.message == "serve on h1 failed | rollback: the host does not serve: triton: exited"


def test_a_host_whose_rollout_breaks_unexpectedly_is_a_rollback_failure_with_the_error(monkeypatch, tmp_path):
    class Broken(dict):
        def get(self, key, default=None):
            raise ValueError("bad host data")

    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None: (True, ""))
    rollout.hosts["h1"] = Broken()
    r = rollout.roll("h1", 1)
    assert (r.status, r.failed_step, r.message) == ("rollback failed", "rollout", "ValueError: bad host data")


def test_an_unexpected_error_after_a_failed_step_keeps_the_step_and_its_reason(monkeypatch, tmp_path):
    def lost(name, data):
        raise RuntimeError("ssh lost")

    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None:
                            (deploy.endswith("rollback.py"), "serve on h1 failed"))
    monkeypatch.setattr(ro, "serving", lost)
    r = rollout.roll("h1", 1)
    assert (r.status, r.failed_step, r.message) == ("rollback failed", "serve",
                                                    "serve on h1 failed | RuntimeError: ssh lost")


def test_an_unexpected_error_keeps_a_failure_status_already_given(monkeypatch, tmp_path):
    class LB:
        def take_out(self, name, data):
            pass

        def put_back(self, name, data):
            raise ro.RolloutError("unhealthy")

    def info(msg, *args, **kwargs):  # a line that cannot be said breaks the host's rollout after its status
        if "not healthy" in msg:
            raise OSError("stdout closed")

    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None: (True, ""), lb=LB())
    monkeypatch.setattr(ro.logger, "info", info)
    r = rollout.roll("h1", 1)
    assert (r.status, r.failed_step) == ("out of the load balancer", "put back")
    assert r.message == "put back: unhealthy | OSError: stdout closed"


@pytest.mark.parametrize("outcome, line", [((True, ""), "h1: updated in 2.3s"),
                                           ((False, "x"), "h1: rolled back (serve) in 2.3s")])
def test_a_host_says_its_status_step_and_time_to_a_tenth_of_a_second(monkeypatch, tmp_path, outcome, line, said):
    clock = iter([10.0, 12.345])
    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None:
                                (True, "") if deploy.endswith("rollback.py") else outcome)
    monkeypatch.setattr(ro.time, "monotonic", lambda: next(clock))
    r = rollout.roll("h1", 3)
    assert (r.batch, r.seconds) == (3, 2.3)
    assert said() == [line] if outcome[0] else said()[-1] == line


# -- the fleet: batches, leftovers, interrupts, the exit code --------------------------------------------------


def test_the_batches_are_numbered_from_one_and_the_first_is_the_canary(monkeypatch, tmp_path, said):
    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None: (True, ""),
                                hosts=("h1", "h2", "h3", "h4"), canary=1, batch=2)
    report = rollout.run()
    assert [line for line in said() if line.startswith("batch")] == ["batch 1/3 (canary): h1", "batch 2/3: h2, h3",
                                                                    "batch 3/3: h4"]
    assert [h["batch"] for h in report["hosts"]] == [1, 2, 2, 3]


def test_without_a_canary_no_batch_is_called_one(monkeypatch, tmp_path, said):
    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None: (True, ""),
                                hosts=("h1", "h2", "h3"), canary=0, batch=2)
    rollout.run()
    assert [line for line in said() if line.startswith("batch")] == ["batch 1/2: h1, h2", "batch 2/2: h3"]


def test_the_runs_an_earlier_rollout_left_are_named(monkeypatch, tmp_path, said):
    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None: (True, ""))
    (tmp_path / ".rollout-running.json").write_text(json.dumps({"999998": "h2", "999999": "h1"}))
    rollout.run()
    assert said()[0] == "waited for the runs an earlier rollout left on h1, h2"


def test_a_target_group_that_cannot_be_used_ends_main_with_its_reason(monkeypatch, tmp_path):
    from tritonfleet.fleet import lb

    class Group:
        def __init__(self, *args, **kwargs):
            pass

        def check(self, hosts):
            raise lb.TargetGroupError("arn:tg: h1 has no instance_id")

    monkeypatch.setattr(lb, "TargetGroup", Group)
    with pytest.raises(ro.RolloutError) as caught:
        main_with(monkeypatch, tmp_path, target_group="arn:tg")
    assert str(caught.value) == "arn:tg: h1 has no instance_id"


def test_ctrl_c_during_main_finishes_the_batch_and_starts_no_other(monkeypatch, tmp_path, said):
    import signal

    from tritonfleet.access import inventory

    def run(self, deploy, host, data=None):
        if host == "h1":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
        return True, ""

    monkeypatch.setattr(inventory, "load_inventory_groups", lambda path, _read=lambda path: [("h1", {}), ("h2", {}), ("h3", {})]: (_read(path), {}))
    monkeypatch.setattr(ro, "rollback_point", lambda name, data: {"servers": {}, "models_version": None})
    monkeypatch.setattr(ro.Runner, "run", run)
    monkeypatch.setattr(ro, "print_summary", lambda report: None)
    before = signal.getsignal(signal.SIGINT)
    rc = ro.main(ro.Options(inventory="inv.py", reports_dir=str(tmp_path)))
    assert signal.getsignal(signal.SIGINT) is before
    (path,) = tmp_path.glob("rollout-*.json")
    report = json.loads(path.read_text())
    assert rc == 1 and report["stopped"] == "interrupted"
    assert [h["status"] for h in report["hosts"]] == ["updated", "not started", "not started"]
    assert "interrupted: the hosts in flight finish their steps; no new batch starts" in said()
    assert said()[-1] == f"report: {path}"


def test_a_failed_host_within_fail_percent_still_fails_main(monkeypatch, tmp_path):
    from tritonfleet.access import inventory

    monkeypatch.setattr(inventory, "load_inventory_groups", lambda path, _read=lambda path: [("h1", {}), ("h2", {})]: (_read(path), {}))
    monkeypatch.setattr(ro, "rollback_point", lambda name, data: {"servers": {}, "models_version": None})
    monkeypatch.setattr(ro, "serving", lambda name, data: (True, ""))
    monkeypatch.setattr(ro.Runner, "run", lambda self, deploy, host, data=None:
                        (host != "h1" or deploy.endswith("rollback.py"), "x"))
    monkeypatch.setattr(ro, "print_summary", lambda report: None)
    opts = ro.Options(inventory="inv.py", reports_dir=str(tmp_path), fail_percent=100)
    assert ro.main(opts) == 1
    (path,) = tmp_path.glob("rollout-*.json")
    report = json.loads(path.read_text())
    assert report["failures"] == 1 and report["stopped"] is None


# -- the pyinfra runs ------------------------------------------------------------------------------------------


def test_the_runner_runs_the_pyinfra_beside_its_python():
    import sys
    from pathlib import Path

    runner = ro.Runner(ro.Options(inventory="x"))
    assert runner.pyinfra == str(Path(sys.executable).parent / "pyinfra")


def stub_pyinfra(tmp_path, rc: int):
    """A pyinfra that writes where it runs, its progress setting, its arguments and the state file it finds,
    then says something on stdout and an error on stderr and exits ``rc``."""
    reports = tmp_path / "a" / "reports"
    stub = tmp_path / "pyinfra"
    stub.write_text(f"""#!/bin/sh
n=0; while ! grep -q "\\"$$\\"" "{reports}/.rollout-running.json" 2>/dev/null && [ $n -lt 40 ]; do
  sleep 0.05; n=$((n + 1)); done  # the rollout records the run right after starting it
{{ pwd; echo "progress=$PYINFRA_PROGRESS"; for a in "$@"; do echo "$a"; done
   cat "{reports}/.rollout-running.json"; echo; echo "pid=$$"; }} > "{tmp_path}/seen"
echo noise; echo 'ERROR boom' >&2; exit {rc}
""")
    stub.chmod(0o755)
    root = tmp_path / "root"
    root.mkdir()
    runner = ro.Runner(ro.Options(inventory="inv.py", reports_dir=str(reports), root=str(root)))
    runner.pyinfra = str(stub)
    return runner, root, reports


@pytest.mark.parametrize("rc", [0, 1, 3])
def test_a_run_is_pyinfra_on_one_host_in_the_checkout_with_its_data_and_the_state_file_kept(tmp_path, rc):
    runner, root, reports = stub_pyinfra(tmp_path, rc)
    ok, why = runner.run("deploys/rollback.py", "h1", {"a": "1", "b": "x=y"})
    assert (ok, why) == (rc == 0, "ERROR boom")
    seen = (tmp_path / "seen").read_text().splitlines()
    pid = seen[-1].removeprefix("pid=")
    assert seen[:-2] == [str(root), "progress=off", "-y", "inv.py", "deploys/rollback.py", "--limit", "h1",
                         "--data", "a=1", "--data", "b=x=y"]
    assert json.loads(seen[-2]) == {pid: "h1"}  # while it ran
    assert json.loads((reports / ".rollout-running.json").read_text()) == {}  # once it had ended


def leftovers(monkeypatch, tmp_path, dies_after: int | None):
    """A state file naming pid 4242 on h1; the pid runs for ``dies_after`` looks (None: for ever)."""
    clock = Clock(0)
    looks = []

    def alive(pid):
        looks.append(pid)
        return pid == 4242 and (dies_after is None or len(looks) <= dies_after)

    monkeypatch.setattr(rn, "_alive", alive)
    monkeypatch.setattr(rn.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(rn.time, "sleep", clock.sleep)
    runner = ro.Runner(ro.Options(inventory="x", reports_dir=str(tmp_path)))
    runner.state_file.write_text(json.dumps({"4242": "h1"}))
    return runner, clock


def test_leftover_runs_still_running_after_half_an_hour_stop_the_rollout(monkeypatch, tmp_path):
    runner, clock = leftovers(monkeypatch, tmp_path, None)
    with pytest.raises(ro.RolloutError) as caught:
        runner.wait_for_leftovers()
    assert str(caught.value) == "pyinfra runs of an earlier rollout still running: pids [4242]"
    assert clock.slept == [1] * 1800


def test_leftover_runs_are_looked_at_each_second_until_they_end(monkeypatch, tmp_path):
    runner, clock = leftovers(monkeypatch, tmp_path, 3)
    assert runner.wait_for_leftovers() == ["h1"]
    assert clock.slept == [1, 1, 1]


def test_a_bad_plan_is_refused_in_one_line():
    with pytest.raises(ro.RolloutError) as caught:
        ro.plan(["a"], -1, 1)
    assert str(caught.value) == "batch must be >= 1 and canary >= 0"


def test_every_host_of_a_batch_runs_at_once(monkeypatch, tmp_path):
    import threading

    hosts = tuple(f"h{i}" for i in range(40))
    barrier = threading.Barrier(len(hosts), timeout=10)

    def run(self, deploy, host, data=None):
        barrier.wait()
        return True, ""

    rollout = rollout_of(monkeypatch, tmp_path, run, hosts=hosts, canary=0, batch=len(hosts))
    assert {h["status"] for h in rollout.run()["hosts"]} == {"updated"}


@pytest.mark.parametrize("fail_percent, stopped", [(10, True), (25, False)])
def test_new_batches_stop_once_the_failures_pass_fail_percent(monkeypatch, tmp_path, fail_percent, stopped):
    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None:
                            (host != "h1" or deploy.endswith("rollback.py"), "x"), hosts=("h1", "h2", "h3", "h4"))
    rollout.opts.fail_percent = fail_percent
    report = rollout.run()
    assert bool(report["stopped"]) is stopped
    assert (report["hosts"][-1]["status"] == "not started") is stopped


def test_a_failure_in_the_last_batch_stops_nothing(monkeypatch, tmp_path):
    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None:
                            (host != "h2" or deploy.endswith("rollback.py"), "x"), hosts=("h1", "h2"))
    rollout.opts.fail_percent = 0
    report = rollout.run()
    assert report["failures"] == 1 and report["stopped"] is None


def test_the_report_says_what_was_rolled_out_how(monkeypatch, tmp_path):
    rollout = rollout_of(monkeypatch, tmp_path, lambda self, deploy, host, data=None: (True, ""), batch=3)
    report = rollout.run()
    del report["hosts"]
    assert report == {"inventory": "inv.py", "deploy": "deploys/serve.py", "batch": 3, "canary": 1,
                      "fail_percent": 100, "stopped": None, "failures": 0}
