"""The command line's logging: tritonfleet's progress lines (INFO) on stderr as they are, ``-v`` adds its DEBUG
lines (``<logger>: debug: ...``), ``-vv`` every library's; the setup lasts one invocation."""

from __future__ import annotations

import logging

import pytest
from click.testing import CliRunner

from tritonfleet.face import cli
from tritonfleet.fleet import rollout as ro


@pytest.fixture
def unreachable(tmp_path, monkeypatch):
    """An inventory of one host nothing listens for (loopback, port 1)."""
    inv = tmp_path / "inv.py"
    inv.write_text("hosts = [('far', {'ssh_hostname': '127.0.0.1', 'ssh_port': 1, 'ssh_user': 'nobody'})]\n")
    monkeypatch.setenv("COLUMNS", "200")
    return str(inv)


def _ours() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if h.get_name() == cli.HANDLER]


def test_without_v_no_debug_line_is_shown(unreachable):
    result = CliRunner().invoke(cli.main, ["status", "--inventory", unreachable])
    assert result.exit_code == 1 and "ssh:" in result.stdout
    assert "debug" not in result.stderr and "tritonfleet." not in result.stderr


@pytest.mark.parametrize("flag", ["-v", "--verbose"])
def test_v_shows_tritonfleets_debug_lines_with_their_logger_and_level(unreachable, flag):
    result = CliRunner().invoke(cli.main, [flag, "status", "--inventory", unreachable])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert "tritonfleet.access.ssh: debug: far: ssh nobody@127.0.0.1:1 (key from the agent or ~/.ssh, timeout 10s)" \
        in lines, result.stderr
    assert any(line.startswith("tritonfleet.access.ssh: debug: far: ssh failed: ") for line in lines), lines
    assert "debug" not in result.stdout  # the table stays clean
    assert _ours() == []  # the setup ends with the invocation


def test_the_levels_per_verbosity_and_their_undoing():
    root, ours, lib = logging.getLogger(), logging.getLogger("tritonfleet.fleet.rollout"), logging.getLogger("botocore.x")
    before = (root.level, logging.getLogger("tritonfleet").level, list(root.handlers))
    for verbose, (info, debug, lib_warning, lib_debug) in enumerate([(True, False, True, False),
                                                                     (True, True, True, False),
                                                                     (True, True, True, True)]):
        undo = cli.configure_logging(verbose)
        try:
            assert len(_ours()) == 1
            assert (ours.isEnabledFor(logging.INFO), ours.isEnabledFor(logging.DEBUG)) == (info, debug), verbose
            assert (lib.isEnabledFor(logging.WARNING), lib.isEnabledFor(logging.DEBUG)) == (lib_warning, lib_debug)
            cli.configure_logging(verbose)()  # a second setup replaces the first, it does not add to it
        finally:
            undo()
    assert (root.level, logging.getLogger("tritonfleet").level, list(root.handlers)) == before


def test_info_of_tritonfleet_is_plain_everything_else_says_its_logger_and_level(capsys):
    undo = cli.configure_logging(2)
    try:
        logging.getLogger("tritonfleet.fleet.rollout").info("batch 1/2 (canary): h1")
        logging.getLogger("tritonfleet.fleet.lb").warning("drain %s", "slow")
        logging.getLogger("botocore.credentials").info("Found credentials in environment variables.")
        logging.getLogger("tritonfleetish").info("not ours")
    finally:
        undo()
    assert capsys.readouterr().err.splitlines() == [
        "batch 1/2 (canary): h1", "tritonfleet.fleet.lb: warning: drain slow",
        "botocore.credentials: info: Found credentials in environment variables.", "tritonfleetish: info: not ours"]


def test_the_rollouts_progress_lines_reach_stderr_as_they_were_without_v(monkeypatch, tmp_path):
    """What `tritonfleet rollout` prints while it runs (the lines its `out=` callback printed before)."""
    from tritonfleet.access import inventory

    monkeypatch.setattr(inventory, "load_inventory_groups", lambda path: ([("h1", {}), ("h2", {})], {}))
    monkeypatch.setattr(ro, "rollback_point", lambda name, data: {"servers": {}, "models_version": None})
    monkeypatch.setattr(ro.Runner, "run", lambda self, deploy, host, data=None:
                        (host == "h1" or deploy.endswith("rollback.py"), "serve on h2 failed"))
    monkeypatch.setattr(ro, "serving", lambda name, data: (True, ""))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deploys").mkdir()
    (tmp_path / "deploys" / "serve.py").write_text("")
    (tmp_path / "inv.py").write_text("")
    result = CliRunner().invoke(cli.main, ["rollout", "-i", "inv.py", "--fail-percent", "100", "--reports", "r"])
    assert result.exit_code == 1, result.output
    (report,) = (tmp_path / "r").glob("rollout-*.json")
    lines = result.stderr.splitlines()
    assert lines[0] == "batch 1/2 (canary): h1" and lines[1].startswith("h1: updated in ")
    assert lines[2:4] == ["batch 2/2: h2", "h2: serve failed, rolling back: serve on h2 failed"]
    assert lines[4].startswith("h2: rolled back (serve) in ") and lines[5] == f"report: r/{report.name}"
    assert len(lines) == 6 and "rollout" in result.stdout  # the summary table on stdout
    assert _ours() == []
