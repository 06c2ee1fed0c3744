"""``inventories/ec2.py``: host groups and data from the fleet's tags, loaded the way pyinfra loads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostconfigs import host_config
from tests.unit.test_fleet_support import (
    GPU_PARAM,
    NEURON_PARAM,
    REGION,
    always_up,
    aws,  # noqa: F401 - fixture
    image_named,
    no_sleep,
    put_public_parameter,
    spec,
)
from tritonfleet.access.inventory import load_inventory
from tritonfleet.fleet import instances, keys, lifecycle
from tritonfleet.fleet.inventory import groups_from_env, host_data

EC2_INVENTORY = Path(__file__).resolve().parents[2] / "inventories" / "ec2.py"
FPR = "C" * 40


def _load(monkeypatch, fleet="prod", **env):
    monkeypatch.setenv("TRITONFLEET_REGION", REGION)
    monkeypatch.setenv("TRITONFLEET_FLEET", fleet)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return dict(load_inventory(EC2_INVENTORY))


def _groups(monkeypatch, fleet="prod"):
    namespace: dict = {}
    monkeypatch.setenv("TRITONFLEET_REGION", REGION)
    monkeypatch.setenv("TRITONFLEET_FLEET", fleet)
    exec(compile(EC2_INVENTORY.read_text(), str(EC2_INVENTORY), "exec"), namespace)  # as pyinfra's exec_file
    return {k: v for k, v in namespace.items() if not k.startswith("_") and isinstance(v, list)}


@pytest.fixture
def fleet(aws):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    put_public_parameter(GPU_PARAM, image_named(aws, "amzn"))
    neuron = lifecycle.up(aws, spec(count=2), probe=always_up, sleep=no_sleep)
    gpu = lifecycle.up(aws, spec(instance_type="g5.xlarge", count=1, role="canary"), probe=always_up, sleep=no_sleep)
    lifecycle.up(aws, spec(fleet="staging", count=1), probe=always_up, sleep=no_sleep)
    return aws, sorted(neuron.launched), gpu.launched


def test_hosts_groups_and_data_from_tags(fleet, monkeypatch):
    clients, neuron, gpu = fleet
    groups = _groups(monkeypatch)
    names = {g: sorted(h for h, _d in hosts) for g, hosts in groups.items()}
    assert names == {"inf2": neuron, "gpu": gpu, "fleet_prod": sorted(neuron + gpu), "role_serve": neuron,
                     "role_canary": gpu}
    hosts = _load(monkeypatch)
    assert sorted(hosts) == sorted(neuron + gpu)  # the staging fleet's instance is not here
    described = {i["InstanceId"]: i for i in instances.describe(clients, fleet="prod")}
    first = hosts[neuron[0]]
    inst = described[neuron[0]]
    assert first["instance_type"] == "inf2.xlarge"
    assert first["ssh_hostname"] == inst["PublicIpAddress"]
    assert first["ec2_private_ip"] == inst["PrivateIpAddress"]
    assert first["ec2_availability_zone"] == inst["Placement"]["AvailabilityZone"]
    assert first["ssh_user"] == "ubuntu" and first["_sudo"] is True
    assert first["ssh_key"] == str(keys.private_key_path("prod"))
    assert first["ssh_known_hosts_file"] == str(keys.known_hosts_path("prod"))
    assert hosts[gpu[0]]["ssh_user"] == "ec2-user"  # the GPU AMI here is an Amazon Linux image
    assert hosts[gpu[0]]["ec2_role"] == "canary"


def test_host_data_passes_preflight(fleet, monkeypatch):
    _clients, neuron, gpu = fleet
    hosts = _load(monkeypatch, TRITONFLEET_REPOSITORY_SECRET="fleet-secret-0123456789")
    cfg = host_config({**hosts[neuron[0]], "neuron_key_fingerprint": FPR}, name=neuron[0])
    assert cfg.instance.name == "inf2.xlarge"
    cfg = host_config({**hosts[gpu[0]], "nvidia_key_fingerprint": FPR}, name=gpu[0])
    assert cfg.instance.name == "g5.xlarge"


def test_private_address_when_there_is_no_public_one():
    inst = {"InstanceId": "i-1", "InstanceType": "trn1.2xlarge", "PrivateIpAddress": "10.0.0.5",
            "Tags": [{"Key": "tritonfleet:role", "Value": "serve"}]}
    data = host_data(inst, "prod", environ={"TRITONFLEET_SSH_KEY": "/keys/mine"})
    assert data["ssh_hostname"] == "10.0.0.5" and data["ssh_key"] == "/keys/mine"


def test_ssh_key_from_the_environment_wins(fleet, monkeypatch):
    _clients, neuron, _gpu = fleet
    hosts = _load(monkeypatch, TRITONFLEET_SSH_KEY="/keys/prod")
    assert hosts[neuron[0]]["ssh_key"] == "/keys/prod"


@pytest.mark.parametrize("env, message", [
    ({}, "set TRITONFLEET_REGION and TRITONFLEET_FLEET"),
    ({"TRITONFLEET_REGION": REGION}, "set TRITONFLEET_FLEET"),
    ({"TRITONFLEET_REGION": REGION, "TRITONFLEET_FLEET": "Bad_Name"}, "fleet name"),
])
def test_unset_environment_is_a_one_line_exit(env, message):
    with pytest.raises(SystemExit) as exc:
        groups_from_env(env)
    assert message in str(exc.value.code) and "\n" not in str(exc.value.code)


def test_empty_fleet_is_a_one_line_exit(aws, monkeypatch):  # noqa: F811
    with pytest.raises(SystemExit, match=f"fleet nothing has no running instances in {REGION}"):
        _load(monkeypatch, fleet="nothing")
