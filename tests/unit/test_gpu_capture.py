"""The sandbox's GPU stand-ins held to a real NVIDIA host.

``tests/data/nvidia/h100-capture.json`` was taken by ``tools/gpu_capture.py`` on an NVIDIA H100 80GB HBM3
(driver 580.159.04, nvidia-smi 580.159.04, NVML through nvidia-ml-py 13.610.43) on 2026-11-27. These tests
run our ``NvidiaSmi`` fact's parser on the real output, and run the ``nvidia-smi`` stand-in on a relocated
root that has the same GPU, then compare the two answer for answer: headers, units, separators, field
formats, exit codes and error lines. What the stand-in does not imitate is named in ``KNOWN_DIFFERENCES``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from roles.facts.accelerators import NvidiaSmi
from tritonfleet import catalog
from tritonfleet.agent import memory
from tritonfleet.sandbox import dcgmimage, standins

CAPTURE = json.loads((Path(__file__).resolve().parents[1] / "data/nvidia/h100-capture.json").read_text())
REAL = CAPTURE["commands"]
GPU = CAPTURE["nvml"]["devices"][0]
REAL_TOTAL_MIB = GPU["memory"]["total"] >> 20

#: what the stand-in leaves out on purpose (each checked below to still be a difference, so the list stays true)
KNOWN_DIFFERENCES = {
    "default": "the table view is abridged (no fan/temp/power row, no MIG column); nothing of ours parses it",
    "memory.free": "the real tool keeps ~480 MiB reserved out of free; the stand-in reports free = total",
    "dev_nodes": "the real driver also has /dev/nvidia-uvm, nvidia-uvm-tools and /dev/nvidia-caps; the stand-in "
                 "driver makes nvidia0..N and nvidiactl (the container runtime stand-in injects nothing)",
}


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory):
    """``run(*args)`` runs the nvidia-smi stand-in of driver 580.159.04 on a root with one H100 of the
    capture's size."""
    root = tmp_path_factory.mktemp("h100")
    for d in ("dev", "etc/tritonfleet-sandbox", "usr/bin"):
        (root / d).mkdir(parents=True)
    for node in ("nvidia0", "nvidiactl"):
        (root / "dev" / node).touch()  # regular files stand for nodes under a relocated root
    (root / "etc/tritonfleet-sandbox/hardware.json").write_text(json.dumps(
        {"accelerator": "gpu", "device_name": "H100", "device_count": 1,
         "device_memory_bytes": GPU["memory"]["total"], "instance_id": "i-0123456789abcdef0"}))
    tool = root / "usr/bin/nvidia-smi"
    tool.write_text(standins._template("nvidia_smi.py.in", PACKAGE="nvidia-driver-580-server",
                                       VERSION="580.159.04-0ubuntu1", VERSION_UPSTREAM="580.159.04", CUDA="13.0"))
    env = {**os.environ, "TRITONFLEET_SANDBOX_ROOT": str(root)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(tool), *args], capture_output=True, text=True, env=env,
                              timeout=30)

    return run


def answer(key: str, standin) -> tuple[dict, subprocess.CompletedProcess[str]]:
    real = REAL[key]
    return real, standin(*real["argv"][1:])


def shape(value: str) -> str:
    """A value's format with its content taken out: digits -> 9, hex in UUIDs and PCI bus ids -> x, words kept."""
    value = re.sub(r"GPU-[0-9a-f-]+", lambda m: re.sub(r"[0-9a-f]", "x", m.group(0)), value)
    value = re.sub(r"\b[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]\b",
                   lambda m: re.sub(r"[0-9A-F]", "x", m.group(0)), value)
    return re.sub(r"\d+", "9", value)


def test_the_fact_parses_the_real_output():
    fact = NvidiaSmi()
    parsed = fact.process(REAL["fact"]["stdout"].splitlines())
    assert parsed == {"gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04"], "error": None, "driver": "580.159.04"}
    assert REAL["fact"]["rc"] == 0


@pytest.mark.parametrize("key", ["fact", "standin_fields_header", "standin_fields_noheader",
                                 "standin_fields_nounits", "no_format"])
def test_queries_answer_in_the_real_format(standin, key):
    real, ours = answer(key, standin)
    assert ours.returncode == real["rc"], ours.stdout + ours.stderr
    real_lines, our_lines = real["stdout"].splitlines(), ours.stdout.splitlines()
    assert len(our_lines) == len(real_lines)
    for real_line, our_line in zip(real_lines, our_lines, strict=True):
        real_cells, our_cells = real_line.split(", "), our_line.split(", ")
        assert len(our_cells) == len(real_cells)
        fields = real["argv"][1].split("=", 1)[1].split(",")
        for field, r, o in zip(fields, real_cells, our_cells, strict=True):
            if field in ("pstate",):  # P0 on a persistence-mode host, P8 in the stand-in: same shape P9
                assert shape(o) == shape(r)
            elif field in ("name", "driver_version", "count", "memory.total", "index") or r == field or "[" in r:
                assert o == r, (field, o, r)  # header cells, the name, the driver and the size are exact
            else:
                assert shape(o) == shape(r), (field, o, r)


def test_the_stand_in_names_and_sizes_the_gpu_as_nvml_does(standin):
    row = standin("--query-gpu=name,memory.total", "--format=csv,noheader,nounits").stdout.strip()
    assert row == f"{GPU['name']}, {REAL_TOTAL_MIB}"
    assert dcgmimage.model_name("H100") == GPU["name"]  # the dcgm-exporter stand-in's modelName label


@pytest.mark.parametrize("key", ["list", "version", "invalid_field"])
def test_other_answers_match_line_for_line(standin, key):
    real, ours = answer(key, standin)
    assert ours.returncode == real["rc"]
    real_lines = [shape(line) for line in real["stdout"].splitlines()]
    assert [shape(line) for line in ours.stdout.splitlines()] == real_lines


def test_the_stand_in_driver_makes_the_real_node_numbers():
    listing = REAL["dev_nodes"]["stdout"]
    real = {m.group(3): (int(m.group(1)), int(m.group(2)))
            for m in re.finditer(r"^c\S+ +\d+ \S+ \S+ +(\d+), +(\d+) .* /dev/(nvidia\d+|nvidiactl)$", listing, re.M)}
    assert real == {"nvidia0": (195, 0), "nvidiactl": (195, 255)}
    driver = (Path(standins.__file__).parent / "standins/driver_maint.py.in").read_text()
    assert "NVIDIA_MAJOR = 195" in driver and '(NVIDIA_MAJOR, 255)' in driver and "(NVIDIA_MAJOR, i)" in driver


def test_known_differences_are_still_differences(standin):
    """Each entry of KNOWN_DIFFERENCES is true of the stand-in today; one that no longer is must leave the list."""
    ours = standin()
    assert ours.stdout.splitlines()[1:] != REAL["default"]["stdout"].splitlines()[1:]
    free = standin("--query-gpu=memory.free", "--format=csv,noheader,nounits").stdout.strip()
    real_free = REAL["standin_fields_nounits"]["stdout"].split(", ")[9]
    assert int(free) == REAL_TOTAL_MIB > int(real_free)
    assert "/dev/nvidia-uvm" in REAL["dev_nodes"]["stdout"]
    driver = (Path(standins.__file__).parent / "standins/driver_maint.py.in").read_text()
    assert "nvidia-uvm" not in driver


def test_the_default_headroom_covers_nominal_versus_usable_gpu_memory():
    """EC2 and our catalog give an H100 80 GiB (81920 MiB); the card reports 81559 MiB and keeps ~480 MiB
    reserved, so 81079 MiB is free before any CUDA context. The default headroom must keep the plan under
    that; none at all would not."""
    nominal = catalog.CATALOG["p5.48xlarge"].device_memory_mib
    real_free = int(REAL["standin_fields_nounits"]["stdout"].split(", ")[9])
    assert nominal > real_free
    assert memory.capacity(1, nominal, "gpu").mib <= real_free
    assert memory.capacity(1, nominal, "gpu", headroom_pct=0).mib > real_free


def test_nvml_agrees_with_nvidia_smi():
    """NVML (what dcgm-exporter reads) and nvidia-smi agree on name, UUID, bus id, driver and size."""
    row = REAL["standin_fields_noheader"]["stdout"].strip().split(", ")
    assert row[1] == GPU["name"] and row[2] == GPU["uuid"] and row[3] == GPU["serial"]
    assert row[4] == GPU["pci"] and row[5] == CAPTURE["nvml"]["driver_version"]
    assert int(row[7].split()[0]) == REAL_TOTAL_MIB
    assert CAPTURE["nvml"]["cuda_driver_version"] == 13000 and "CUDA Version: 13.0" in REAL["default"]["stdout"]
