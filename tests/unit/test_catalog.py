"""Tests for tritonfleet.catalog: static table, lookup, and conversion of EC2 DescribeInstanceTypes data."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from tritonfleet import catalog
from tritonfleet.catalog import CATALOG, InstanceType, UnknownInstanceType

EXPECTED_NAMES = {
    "inf1.xlarge", "inf1.2xlarge", "inf1.6xlarge", "inf1.24xlarge",
    "inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge", "inf2.48xlarge",
    "trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge",
    "trn2.3xlarge", "trn2.48xlarge", "trn2u.48xlarge",
    "g4dn.xlarge", "g4dn.2xlarge", "g4dn.4xlarge", "g4dn.8xlarge", "g4dn.12xlarge", "g4dn.16xlarge",
    "g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g5.12xlarge", "g5.16xlarge", "g5.24xlarge",
    "g5.48xlarge",
    "g6.xlarge", "g6.2xlarge", "g6.4xlarge", "g6.8xlarge", "g6.12xlarge", "g6.16xlarge", "g6.24xlarge",
    "g6.48xlarge",
    "g6e.xlarge", "g6e.2xlarge", "g6e.4xlarge", "g6e.8xlarge", "g6e.12xlarge", "g6e.16xlarge",
    "g6e.24xlarge", "g6e.48xlarge",
    "p4d.24xlarge", "p5.48xlarge",
}  # fmt: skip


def test_catalog_has_every_expected_size() -> None:
    assert EXPECTED_NAMES <= set(catalog.known())


def test_known_is_sorted_by_family_then_size() -> None:
    names = catalog.known()
    inf2 = [n for n in names if n.startswith("inf2.")]
    assert inf2 == ["inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge", "inf2.48xlarge"]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("name", "family", "device", "devices", "cores_per_device", "vcpus", "mem_gib", "dev_gib", "efa"),
    [
        ("inf1.xlarge", "inf1", "Inferentia", 1, 4, 4, 8, 8, False),
        ("inf1.6xlarge", "inf1", "Inferentia", 4, 4, 24, 48, 8, False),
        ("inf1.24xlarge", "inf1", "Inferentia", 16, 4, 96, 192, 8, True),
        ("inf2.xlarge", "inf2", "Inferentia2", 1, 2, 4, 16, 32, False),
        ("inf2.8xlarge", "inf2", "Inferentia2", 1, 2, 32, 128, 32, False),
        ("inf2.24xlarge", "inf2", "Inferentia2", 6, 2, 96, 384, 32, False),
        ("inf2.48xlarge", "inf2", "Inferentia2", 12, 2, 192, 768, 32, False),
        ("trn1.2xlarge", "trn1", "Trainium", 1, 2, 8, 32, 32, False),
        ("trn1.32xlarge", "trn1", "Trainium", 16, 2, 128, 512, 32, True),
        ("trn1n.32xlarge", "trn1n", "Trainium", 16, 2, 128, 512, 32, True),
        ("trn2.48xlarge", "trn2", "Trainium2", 16, 4, 192, 2048, 96, True),
        ("trn2u.48xlarge", "trn2u", "Trainium2", 16, 4, 192, 2048, 96, True),
        ("g4dn.12xlarge", "g4dn", "T4", 4, 1, 48, 192, 16, True),
        ("g5.48xlarge", "g5", "A10G", 8, 1, 192, 768, 24, True),
        ("g6.xlarge", "g6", "L4", 1, 1, 4, 16, 24, False),
        ("g6e.12xlarge", "g6e", "L40S", 4, 1, 48, 384, 48, True),
        ("p4d.24xlarge", "p4d", "A100", 8, 1, 96, 1152, 40, True),
        ("p5.48xlarge", "p5", "H100", 8, 1, 192, 2048, 80, True),
    ],
)
def test_research_facts(
    name: str,
    family: str,
    device: str,
    devices: int,
    cores_per_device: int,
    vcpus: int,
    mem_gib: int,
    dev_gib: int,
    efa: bool,
) -> None:
    it = catalog.get(name)
    assert it.name == name
    assert it.family == family
    assert it.device_name == device
    assert it.device_count == devices
    assert it.cores_per_device == cores_per_device
    assert it.vcpus == vcpus
    assert it.memory_mib == mem_gib * 1024
    assert it.device_memory_mib == dev_gib * 1024
    assert it.efa is efa


def test_core_counts() -> None:
    assert catalog.get("inf2.48xlarge").core_count == 24
    assert catalog.get("trn1.32xlarge").core_count == 32
    assert catalog.get("inf1.6xlarge").core_count == 16
    assert catalog.get("inf1.24xlarge").core_count == 64
    assert catalog.get("trn2.48xlarge").core_count == 64
    assert catalog.get("g5.12xlarge").core_count == 4


GENERAL_PURPOSE = {f"{family}.{size}" for family in ("m5", "m6i", "c6i") for size in ("large", "xlarge", "2xlarge", "4xlarge")} \
    | {"t3.medium", "t3.large", "t3.xlarge", "t3.2xlarge"}


def test_accelerator_and_lnc() -> None:
    for it in CATALOG.values():
        assert it.accelerator == (
            "gpu" if it.device_name in {"T4", "A10G", "L4", "L40S", "A100", "H100"}
            else "none" if it.name in GENERAL_PURPOSE else "neuron"
        )
        assert it.logical_neuroncore_config == (2 if it.device_name == "Trainium2" else None)
        if it.accelerator == "gpu":
            assert it.cores_per_device == 1


@pytest.mark.parametrize(
    ("name", "arch"),
    [
        ("inf1.xlarge", "inf1"),
        ("inf2.24xlarge", "inf2"),
        ("trn1.2xlarge", "trn1"),
        ("trn1n.32xlarge", "trn1"),
        ("trn2.48xlarge", "trn2"),
        ("trn2u.48xlarge", "trn2"),
        ("g5.xlarge", None),
        ("p5.48xlarge", None),
    ],
)
def test_neuron_arch(name: str, arch: str | None) -> None:
    assert catalog.get(name).neuron_arch == arch


def test_cores_of_device_uses_global_ids() -> None:
    trn2 = catalog.get("trn2.48xlarge")
    assert list(trn2.cores_of_device(15)) == [60, 61, 62, 63]  # neuron-ls doc example (LNC=2)
    inf1 = catalog.get("inf1.24xlarge")
    assert inf1.device_of_core(51) == 12 and inf1.device_of_core(52) == 13  # container-cores doc example
    inf2 = catalog.get("inf2.48xlarge")
    assert list(inf2.cores_of_device(0)) == [0, 1]
    assert list(inf2.cores_of_device(11)) == [22, 23]
    every = [c for d in range(inf2.device_count) for c in inf2.cores_of_device(d)]
    assert every == list(range(inf2.core_count))


@pytest.mark.parametrize("index", [-1, 12, 100])
def test_cores_of_device_out_of_range(index: int) -> None:
    with pytest.raises(ValueError, match="inf2.48xlarge has devices 0-11"):
        catalog.get("inf2.48xlarge").cores_of_device(index)


def test_cores_of_device_rejects_non_int() -> None:
    with pytest.raises(TypeError):
        catalog.get("inf2.48xlarge").cores_of_device("1")  # type: ignore[arg-type]


def test_get_is_case_and_space_insensitive() -> None:
    assert catalog.get(" INF2.XLarge ") is CATALOG["inf2.xlarge"]


def test_unknown_lists_closest_names() -> None:
    with pytest.raises(UnknownInstanceType) as info:
        catalog.get("inf2.xlarg")
    assert str(info.value).startswith("unknown instance type 'inf2.xlarg'; closest known: inf2.xlarge, ")
    assert "inf2.8xlarge" in info.value.suggestions
    assert isinstance(info.value, ValueError)


def test_unknown_without_close_match_lists_families() -> None:
    with pytest.raises(UnknownInstanceType, match=r"unknown instance type 'zzz'; known families: c6i, g4dn, g5, "):
        catalog.get("zzz")


def test_extra_is_consulted_first() -> None:
    custom = InstanceType(
        name="inf2.xlarge",
        family="inf2",
        accelerator="neuron",
        device_name="Inferentia2",
        device_count=1,
        cores_per_device=2,
        device_memory_mib=30000,
        vcpus=4,
        memory_mib=16384,
        efa=False,
    )
    newer = InstanceType("trn3.3xlarge", "trn3", "neuron", "Trainium3", 1, 8, 131072, 12, 131072, True)
    extra = {"inf2.xlarge": custom, "trn3.3xlarge": newer}
    assert catalog.get("inf2.xlarge", extra) is custom
    assert catalog.get("inf2.xlarge") is CATALOG["inf2.xlarge"]
    assert catalog.get("trn3.3xlarge", extra) is newer
    assert newer.neuron_arch == "trn3"  # unknown device name: derived from the family
    assert "trn3.3xlarge" in catalog.known(extra)
    with pytest.raises(UnknownInstanceType):
        catalog.get("trn3.3xlarge")


def test_general_purpose_types_have_no_accelerator_and_no_devices() -> None:
    assert GENERAL_PURPOSE <= set(catalog.known())
    for name in GENERAL_PURPOSE:
        it = catalog.get(name)
        assert not it.has_accelerator and not it.is_neuron and not it.is_gpu and it.neuron_arch is None
        assert (it.device_count, it.core_count, it.device_memory_mib, it.efa) == (0, 0, 0, False)
        with pytest.raises(ValueError, match="has devices 0--1|not 0"):
            it.cores_of_device(0)
    assert all(it.has_accelerator for it in CATALOG.values() if it.name not in GENERAL_PURPOSE)


def test_instance_type_validates() -> None:
    with pytest.raises(ValueError, match="has no devices"):
        InstanceType("m.large", "m", "none", "", 1, 0, 0, 2, 8, False)
    with pytest.raises(ValueError, match="accelerator"):
        InstanceType("x.large", "x", "tpu", "X", 1, 1, 1, 1, 1, False)
    with pytest.raises(ValueError, match="cores_per_device == 1"):
        InstanceType("g.large", "g", "gpu", "X", 1, 2, 1, 1, 1, False)
    with pytest.raises(ValueError, match=">= 1"):
        InstanceType("n.large", "n", "neuron", "X", 0, 2, 1, 1, 1, False)


# --- from_ec2_description ------------------------------------------------------------------------------


def _neuron_item(name: str, dev: str, count: int, cores: int, version: int, mib: int) -> dict:
    return {
        "InstanceType": name,
        "VCpuInfo": {"DefaultVCpus": 192},
        "MemoryInfo": {"SizeInMiB": 786432},
        "NetworkInfo": {"EfaSupported": True},
        "NeuronInfo": {
            "NeuronDevices": [
                {
                    "Count": count,
                    "Name": dev,
                    "CoreInfo": {"Count": cores, "Version": version},
                    "MemoryInfo": {"SizeInMiB": mib},
                }
            ],
            "TotalNeuronDeviceMemoryInMiB": count * mib,
        },
    }


def test_from_ec2_description_neuron() -> None:
    it = catalog.from_ec2_description(_neuron_item("inf2.48xlarge", "Inferentia2", 12, 2, 2, 32768))
    assert it == InstanceType(
        "inf2.48xlarge", "inf2", "neuron", "Inferentia2", 12, 2, 32768, 192, 786432, True, None
    )


def test_from_ec2_description_trn2_physical_cores_become_logical() -> None:
    it = catalog.from_ec2_description(_neuron_item("trn2.48xlarge", "Trainium2", 16, 8, 3, 98304))
    assert it.cores_per_device == 4
    assert it.logical_neuroncore_config == 2
    assert it.core_count == 64
    assert it.neuron_arch == "trn2"


def test_from_ec2_description_gpu() -> None:
    item = {
        "InstanceType": "g5.12xlarge",
        "VCpuInfo": {"DefaultVCpus": 48},
        "MemoryInfo": {"SizeInMiB": 196608},
        "NetworkInfo": {"EfaSupported": False},
        "GpuInfo": {
            "Gpus": [
                {"Count": 4, "Name": "A10G", "Manufacturer": "NVIDIA", "MemoryInfo": {"SizeInMiB": 22888}}
            ]
        },
    }
    it = catalog.from_ec2_description(item)
    assert (it.accelerator, it.device_name, it.device_count, it.cores_per_device) == ("gpu", "A10G", 4, 1)
    assert (it.device_memory_mib, it.vcpus, it.memory_mib, it.efa) == (22888, 48, 196608, False)
    assert it.neuron_arch is None


def test_from_ec2_description_without_accelerator() -> None:
    item = {"InstanceType": "m5.large", "VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 8192}}
    with pytest.raises(ValueError, match="m5.large has no Neuron devices or GPUs"):
        catalog.from_ec2_description(item)


def test_from_ec2_description_missing_field() -> None:
    item = _neuron_item("inf2.xlarge", "Inferentia2", 1, 2, 2, 32768)
    del item["NeuronInfo"]["NeuronDevices"][0]["CoreInfo"]
    with pytest.raises(ValueError, match="entry inf2.xlarge: missing CoreInfo.Count"):
        catalog.from_ec2_description(item)


def test_from_ec2_description_fractional_gpu_counts_logical_gpus() -> None:
    gpu = {
        "Count": 0,
        "GpuPartitionSize": 0.5,
        "LogicalGpuCount": 1,
        "Name": "L4",
        "MemoryInfo": {"SizeInMiB": 11444},
    }
    item = {
        "InstanceType": "g6f.4xlarge",
        "VCpuInfo": {"DefaultVCpus": 16},
        "MemoryInfo": {"SizeInMiB": 65536},
        "GpuInfo": {"Gpus": [gpu]},
    }
    it = catalog.from_ec2_description(item)
    assert (it.device_count, it.device_memory_mib, it.efa) == (1, 11444, False)
    gpu["LogicalGpuCount"] = 0
    with pytest.raises(ValueError, match="g6f.4xlarge: DescribeInstanceTypes reports no whole GPUs"):
        catalog.from_ec2_description(item)


# --- refresh_from_ec2 (moto) ---------------------------------------------------------------------------


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(var, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


@pytest.mark.parametrize("name", ["inf2.xlarge", "trn1.2xlarge", "inf1.6xlarge"])
def test_refresh_matches_static_catalog(ec2, name: str) -> None:
    refreshed = catalog.refresh_from_ec2(ec2, [name])
    assert set(refreshed) == {name}
    assert refreshed[name] == CATALOG[name]
    assert catalog.get(name, refreshed) is refreshed[name]


def test_refresh_skips_types_without_accelerators(ec2) -> None:
    refreshed = catalog.refresh_from_ec2(ec2, ["m5.large", "inf2.xlarge", "g5.xlarge"])
    assert set(refreshed) == {"inf2.xlarge", "g5.xlarge"}
    assert refreshed["g5.xlarge"].accelerator == "gpu"


def test_refresh_all_types_paginates(ec2) -> None:
    refreshed = catalog.refresh_from_ec2(ec2)
    assert {"inf1.6xlarge", "inf2.48xlarge", "trn1.32xlarge", "p5.48xlarge"} <= set(refreshed)
    assert "m5.large" not in refreshed
    assert all(it.accelerator in ("neuron", "gpu") for it in refreshed.values())


def test_general_purpose_sizes_agree_with_ec2_data(ec2) -> None:
    """vCPUs and memory of the general-purpose rows against moto's DescribeInstanceTypes snapshot."""
    items = ec2.describe_instance_types(InstanceTypes=sorted(GENERAL_PURPOSE))["InstanceTypes"]
    assert {i["InstanceType"] for i in items} == GENERAL_PURPOSE
    for item in items:
        static = CATALOG[item["InstanceType"]]
        assert not item.get("GpuInfo") and not item.get("NeuronInfo"), static.name
        assert (static.vcpus, static.memory_mib) == (item["VCpuInfo"]["DefaultVCpus"],
                                                     item["MemoryInfo"]["SizeInMiB"]), static.name


def test_static_table_agrees_with_ec2_data(ec2) -> None:
    """Cross-check the hand-written table against moto's DescribeInstanceTypes snapshot."""
    refreshed = catalog.refresh_from_ec2(ec2, catalog.known())
    assert len(refreshed) >= 40
    for name, live in refreshed.items():
        static = CATALOG[name]
        got = (live.family, live.accelerator, live.device_name, live.device_count, live.cores_per_device)
        want = (
            static.family,
            static.accelerator,
            static.device_name,
            static.device_count,
            static.cores_per_device,
        )
        assert got == want, name
        assert (live.vcpus, live.memory_mib, live.efa) == (static.vcpus, static.memory_mib, static.efa), name
        assert live.logical_neuroncore_config == static.logical_neuroncore_config, name
        if static.device_name in ("Inferentia", "Inferentia2", "Trainium"):
            assert live.device_memory_mib == static.device_memory_mib, name
