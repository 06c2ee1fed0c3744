"""`tritonfleet status` from the outside: it needs an inventory, and a host out of reach is a row and a
non-zero exit (loopback only: a port nothing listens on)."""

from __future__ import annotations

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
