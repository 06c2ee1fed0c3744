"""Typed host config: defaults merge, derived pins, and one-line host+field errors (pure, no hosts)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from roles.efa import wanted as efa_wanted
from roles.neuron import package_pins
from tests.hostconfigs import host_config
from tests.preflight_cases import BAD
from tritonfleet.config import ConfigError

FPR = "A" * 40
GOOD = {"neuron_key_fingerprint": FPR, "triton_repository_secret": "s" * 24}


def cfg(itype: str, **data):
    return host_config({**GOOD, "instance_type": itype, **data})


@pytest.mark.parametrize("itype,bad,field,msg", BAD)
def test_bad_data_is_one_line_naming_host_and_field(itype, bad, field, msg):
    with pytest.raises(ConfigError) as exc:
        cfg(itype, **bad)
    text = str(exc.value)
    assert text.startswith(f"h1: {field}") and msg in text and "\n" not in text


def test_pins_follow_release_and_family():
    assert package_pins(cfg("inf2.xlarge"))["aws-neuronx-dkms"] == "2.30.2.0*"
    assert package_pins(cfg("inf1.6xlarge"))["aws-neuronx-dkms"] == "2.24.*"
    older = cfg("inf2.xlarge", neuron_sdk_release="2.28.0", neuron_install_runtime=True)
    assert package_pins(older)["aws-neuronx-dkms"] == "2.26.5.0*"
    assert package_pins(older)["aws-neuronx-runtime-lib"] == "2.30.50.0*"
    assert "aws-neuronx-runtime-lib" not in package_pins(cfg("inf1.6xlarge", neuron_install_runtime=True))


def test_efa_only_on_instance_types_with_efa():
    assert efa_wanted(cfg("trn1.32xlarge", efa_key_fingerprint=FPR))
    assert not efa_wanted(cfg("trn1.2xlarge"))
    with pytest.raises(ConfigError, match="efa_key_fingerprint"):
        cfg("trn1.32xlarge")


def test_instance_type_from_lookup_only_when_missing():
    calls = []
    got = host_config(GOOD, instance_type_lookup=lambda: calls.append(1) or "inf2.8xlarge")
    assert got.instance.name == "inf2.8xlarge" and calls == [1]
    host_config({**GOOD, "instance_type": "inf2.xlarge"},
                instance_type_lookup=lambda: calls.append(2) or "x")
    assert calls == [1]


def test_gpu_host_needs_no_neuron_key_but_a_toolkit_key():
    with pytest.raises(ConfigError, match="nvidia_key_fingerprint"):
        host_config({"instance_type": "g5.xlarge", "triton_repository_secret": "s" * 24})
    c = host_config({"instance_type": "g5.12xlarge", "nvidia_key_fingerprint": FPR,
                     "triton_repository_secret": "s" * 24, "triton_servers": [{"gpus": [0, 1]}, {}]})
    assert [p.gpus_flag for p in c.triton.placements] == ["device=0,1", "device=2,3"]


def test_readme_defaults_tables_are_current():
    proc = subprocess.run([sys.executable, "-m", "tritonfleet.face.docgen", "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("key,hint", [("tritn_servers", "triton_servers"), ("TRITON_SERVERS", "triton_servers"),
                                      ("Neuron_Sdk_Release", "neuron_sdk_release")])
def test_near_misses_of_known_keys_are_errors(key, hint):
    with pytest.raises(ConfigError, match=f"h1: {key} \\[\\]: unknown setting; did you mean {hint}"):
        cfg("inf2.xlarge", **{key: []})


def test_keys_far_from_every_known_key_stay_allowed():
    c = cfg("inf2.xlarge", s3_endpoint="http://x", my_team="ml-platform", owner_email="a@b")
    assert c.instance.name == "inf2.xlarge"


STRICTER = [
    ("inf2.xlarge", {"triton_image": "Not A Ref"}, "triton_image", "Docker image reference"),
    ("inf2.xlarge", {"triton_base_image": "nvcr.io/nvidia/tritonserver:24.10-py3:x"}, "triton_base_image", "reference"),
    ("inf2.xlarge", {"neuron_apt_url": ""}, "neuron_apt_url", "at least 1 character"),
    ("inf2.xlarge", {"triton_image_source": "archive", "triton_image": "x:1", "triton_image_archive": "images/x.tar"},
     "triton_image_archive", "absolute path"),
    ("inf2.xlarge", {"docker_data_root": "/"}, "docker_data_root", "not /"),
    ("inf2.xlarge", {"models_source": "/nonexistent/models"}, "models_source", "no such directory on the controller"),
    ("inf2.xlarge", {"triton_extra_args": ["--model-control-mode=poll"]}, "triton_extra_args",
     "--model-control-mode is managed by tritonfleet"),
    ("inf2.xlarge", {"triton_extra_args": ["--http-port=9000"]}, "triton_extra_args", "managed"),
    ("inf2.xlarge", {"docker_ulimit_memlock": -2}, "docker_ulimit_memlock", "greater than or equal to -1"),
    ("inf2.xlarge", {"models_s3_uri": "s3:/bucket"}, "models_s3_uri", "s3://bucket/prefix"),
    ("inf2.xlarge", {"models_s3_region": "Mars"}, "models_s3_region", "region name"),
    ("inf2.xlarge", {"efa_install": "always"}, "efa_install", "has no EFA interface"),
    ("inf1.6xlarge", {"neuron_inf1_dkms_pin": "2.240.*"}, "neuron_inf1_dkms_pin", "2.24 or older"),
    ("inf1.6xlarge", {"neuron_dkms_version": "2.26.*"}, "neuron_dkms_version", "2.24 or older"),
    ("inf2.xlarge", {"neuron_releases": {"2.32.0": {"aws-neuronx-dkms": "latest"}}},
     "neuron_releases['2.32.0']['aws-neuronx-dkms'] 'latest'", "invalid version"),
    ("inf2.xlarge", {"neuron_releases": {"2.32.0": {"aws-neuronx-dkms": "2.1a"}}}, "neuron_releases",
     "invalid version '2.1a'"),
    ("inf2.xlarge", {"docker_ulimit_stack": 0}, "docker_ulimit_stack", "expected -1 (unlimited) or a positive limit"),
    ("g5.xlarge", {"nvidia_key_fingerprint": FPR, "nvidia_toolkit_version": "1.17.*; curl x | sh"},
     "nvidia_toolkit_version", "invalid version"),
    ("inf2.xlarge", {"base_memlock_limit": "0"}, "base_memlock_limit", "positive number of KiB"),
    ("inf2.xlarge", {"docker_log_max_size": "100m\n"}, "docker_log_max_size", "size like 100m"),
    ("inf2.xlarge", {"neuron_sdk_release": "x.y"}, "neuron_sdk_release", "invalid version"),
    ("inf2.xlarge", {"neuron_dkms_version": -1}, "neuron_dkms_version", "valid string"),
    ("inf2.xlarge", {"triton_servers": [{"devices": [-1]}]}, "triton_servers[0].devices", "device -1 not on"),
    ("inf2.xlarge", {"triton_servers": [{"cores": [-3]}]}, "triton_servers[0].cores", "not on this server's devices"),
    ("inf2.xlarge", {"triton_neuron_runtime_version": "new"}, "triton_neuron_runtime_version", "invalid version"),
]


@pytest.mark.parametrize("itype,bad,field,msg", STRICTER)
def test_stricter_preflight(itype, bad, field, msg):
    with pytest.raises(ConfigError) as exc:
        cfg(itype, **bad)
    text = str(exc.value)
    assert text.startswith(f"h1: {field}") and msg in text and "\n" not in text, text


def test_unambiguous_values_are_accepted():
    c = host_config({"instance_type": "g5.xlarge", "nvidia_key_fingerprint": FPR, "triton_repository_secret": "s" * 24,
                     "nvidia_driver_branch": 550})
    assert c.nvidia.driver_branch == "550"
    assert cfg("inf1.6xlarge", neuron_inf1_dkms_pin="2.23.*").neuron.inf1_dkms_pin == "2.23.*"
    assert cfg("inf2.xlarge", docker_ulimit_stack=-1, docker_ulimit_memlock=1).docker.ulimit_stack == -1


@pytest.mark.parametrize("value", ["1.17.3-1", "1.17.*", "1.17.3*", "2.19.64.0", "535.183.01-1", "1:1.17.3-1",
                                   "1.17.3-1.el9", "1.17.0~rc.1-1"])
def test_realistic_toolkit_versions_are_accepted(value):
    c = host_config({"instance_type": "g5.xlarge", "nvidia_key_fingerprint": FPR, "triton_repository_secret": "s" * 24,
                     "nvidia_toolkit_version": value})
    assert c.nvidia.toolkit_version == value


def test_secret_values_are_never_echoed():
    value = "do-not-print-me-0123456789"
    with pytest.raises(ConfigError) as exc:
        cfg("inf2.xlarge", triton_repository_secert=value)
    assert "triton_repository_secert" in str(exc.value) and value not in str(exc.value)
    with pytest.raises(ConfigError) as exc:  # the configured secret's value under another key
        cfg("inf2.xlarge", triton_repository_secret=value, triton_shm_size=value)
    assert "triton_shm_size" in str(exc.value) and value not in str(exc.value)


@pytest.mark.parametrize("key, says", [("models_agent_python", "renamed to agent_python")])
def test_a_renamed_key_says_its_new_name(key, says):
    """kubespray's removed_vars: an old key is not "unknown", it names what to set instead."""
    with pytest.raises(ConfigError) as exc:
        host_config({"instance_type": "inf2.xlarge", "triton_repository_secret": "s" * 24, key: "x"})
    assert str(exc.value) == f"h1: {key} 'x': {says}"
