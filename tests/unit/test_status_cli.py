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
    from tritonfleet.face.status import server_row

    data = {"ssh_hostname": "10.0.0.5"}
    row = server_row("h1", data, "triton", hc.container_summary(_inspect("restarting", True, 7)), None, "8000",
                     serving=True, ready=["add_sub"])  # caught between two crashes, it may even answer
    assert row["state"] == "restarting (7 restarts)" and row["serving"] is False
    row = server_row("h1", data, "triton", hc.container_summary(_inspect("running", False, 0)), None, "8000",
                     serving=True, ready=["add_sub"])
    assert row["state"] == "running" and row["serving"] is True and row["devices"] == "neuron0"
    assert row["endpoint"] == "http://10.0.0.5:8000" and row["ready_models"] == "add_sub"
    row = server_row("h1", data, "triton", None, "Cannot connect to the Docker daemon", "8000", serving=True,
                     ready=["add_sub"])
    assert row["state"].startswith("docker not answering") and row["serving"] is True
