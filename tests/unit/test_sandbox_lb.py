"""The sandbox's load balancer host: `sandbox up` adds one general-purpose host (no accelerator), and
inventories/sandbox.py puts it in the lb group and the Triton hosts in the sandbox group (pure: state files only)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from click.testing import CliRunner

import tritonfleet.sandbox.fleet as fleet
from tests.unit.test_sandbox_fleet import isolated  # noqa: F401 - fixture
from tritonfleet import catalog
from tritonfleet.sandbox import cli

ROOT = Path(__file__).resolve().parents[2]


def test_up_adds_one_general_purpose_lb_host_unless_told_not_to():
    specs = fleet.default_specs(2, ["inf2.xlarge"], lb=True)
    assert [(s.instance_type, s.name) for s in specs] == [("inf2.xlarge", ""), ("inf2.xlarge", ""),
                                                          ("c6i.large", "sbx-lb")]
    assert not catalog.get(fleet.LB_TYPE).has_accelerator
    assert [s.instance_type for s in fleet.default_specs(2, ["inf2.xlarge"])] == ["inf2.xlarge"] * 2
    # a general-purpose type given by hand is the load balancer: no second one
    assert [s.instance_type for s in fleet.default_specs(0, ["inf2.xlarge", "m6i.large"], lb=True)] == [
        "inf2.xlarge", "m6i.large"]


@pytest.mark.parametrize("args, lb", [([], True), (["--no-lb"], False)])
def test_the_cli_asks_for_the_lb_host_by_default(monkeypatch, args, lb):
    seen = []
    monkeypatch.setattr(fleet, "up", lambda specs: seen.append(specs))
    monkeypatch.setattr(cli, "_print_status", lambda: None)
    result = CliRunner().invoke(cli.sandbox, ["up", "--instance-type", "inf2.xlarge", *args])
    assert result.exit_code == 0, result.output
    assert [s.name for s in seen[0]] == [""] + (["sbx-lb"] if lb else [])


def test_the_sandbox_inventory_puts_the_lb_host_in_the_lb_group(isolated):  # noqa: F811
    hosts = {"sbx-01": ("192.168.250.11", "inf2.xlarge"), "sbx-02": ("192.168.250.12", "g5.xlarge"),
             "sbx-lb": ("192.168.250.13", "c6i.large")}
    fleet.save_state({"hosts": {n: {"name": n, "ip": ip, "instance_type": t, "instance_id": f"i-0{i}", "spec": {},
                                    "nspawn_pid": 0} for i, (n, (ip, t)) in enumerate(hosts.items())},
                      "services": {}, "repository_secret": "x", "supplies": {"repos": {}}})
    groups = runpy.run_path(str(ROOT / "inventories/sandbox.py"))
    assert [n for n, _ in groups["sandbox"]] == ["sbx-01", "sbx-02"]
    assert [(n, d["instance_type"], d["ssh_hostname"]) for n, d in groups["lb"]] == [
        ("sbx-lb", "c6i.large", "192.168.250.13")]
