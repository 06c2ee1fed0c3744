#!/usr/bin/env python3
"""Capture what a real NVIDIA host's tools print, for holding the sandbox's GPU stand-ins to them.

Run on a machine with an NVIDIA GPU (the ``device`` tool's H100): ``python3 tools/gpu_capture.py OUT.json``.
Standard library only, plus ``pynvml`` (nvidia-ml-py) when it is importable. Every command our roles, facts
and stand-ins run or imitate is captured with its exit code, stdout and stderr; NVML is read for the values
the dcgm-exporter stand-in reports. ``tests/unit/test_gpu_capture.py`` checks our parsing and the stand-ins'
formats against the capture kept in ``tests/data/nvidia/``.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import subprocess
import sys
import time

#: the fields the nvidia-smi stand-in answers (tritonfleet/sandbox/standins/nvidia_smi.py.in)
STANDIN_FIELDS = ("index,name,uuid,serial,pci.bus_id,driver_version,count,memory.total,memory.used,memory.free,"
                  "utilization.gpu,utilization.memory,temperature.gpu,power.draw,pstate,compute_mode")

#: (key, argv): what the NvidiaSmi fact runs, what tests run, and the stand-in's other answers
COMMANDS = [
    ("fact", ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]),
    ("standin_fields_header", ["nvidia-smi", f"--query-gpu={STANDIN_FIELDS}", "--format=csv"]),
    ("standin_fields_noheader", ["nvidia-smi", f"--query-gpu={STANDIN_FIELDS}", "--format=csv,noheader"]),
    ("standin_fields_nounits", ["nvidia-smi", f"--query-gpu={STANDIN_FIELDS}", "--format=csv,noheader,nounits"]),
    ("list", ["nvidia-smi", "-L"]),
    ("version", ["nvidia-smi", "--version"]),
    ("default", ["nvidia-smi"]),
    ("invalid_field", ["nvidia-smi", "--query-gpu=name,no.such.field", "--format=csv"]),
    ("no_format", ["nvidia-smi", "--query-gpu=name"]),
    ("query_xml", ["nvidia-smi", "-q", "-x"]),
    ("dev_nodes", ["sh", "-c", "ls -l /dev/nvidia* 2>&1; true"]),
    ("proc_version", ["sh", "-c", "cat /proc/driver/nvidia/version 2>&1; true"]),
    ("proc_gpus", ["sh", "-c", "cat /proc/driver/nvidia/gpus/*/information 2>&1; true"]),
    ("container_cli", ["sh", "-c", "command -v nvidia-container-cli && nvidia-container-cli info 2>&1; true"]),
    ("dcgmi", ["sh", "-c", "command -v dcgmi && dcgmi discovery -l 2>&1; true"]),
]


def run(argv: list[str]) -> dict:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return {"argv": argv, "rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"argv": argv, "rc": None, "stdout": "", "stderr": f"{type(exc).__name__}: {exc}"}


def nvml() -> dict:
    """NVML's readings of every device, each call on its own (one that fails records its error)."""
    try:
        import pynvml as n
    except ImportError as exc:
        return {"error": f"pynvml not importable: {exc}"}
    out: dict = {"module": getattr(n, "__version__", None) or "pynvml"}

    def read(fn, *args):
        try:
            value = fn(*args)
            if isinstance(value, bytes):
                value = value.decode()
            if hasattr(value, "_fields_"):
                value = {name: getattr(value, name) for name, _ in value._fields_}
            return value
        except Exception as exc:  # noqa: BLE001 - a capture records whatever NVML says
            return {"error": f"{type(exc).__name__}: {exc}"}

    try:
        n.nvmlInit()
    except Exception as exc:  # noqa: BLE001
        return {"error": f"nvmlInit: {exc}"}
    out["driver_version"] = read(n.nvmlSystemGetDriverVersion)
    out["nvml_version"] = read(n.nvmlSystemGetNVMLVersion)
    out["cuda_driver_version"] = read(n.nvmlSystemGetCudaDriverVersion)
    devices = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        devices.append({
            "index": i,
            "name": read(n.nvmlDeviceGetName, h),
            "uuid": read(n.nvmlDeviceGetUUID, h),
            "serial": read(n.nvmlDeviceGetSerial, h),
            "minor_number": read(n.nvmlDeviceGetMinorNumber, h),
            "brand": read(n.nvmlDeviceGetBrand, h),
            "pci": read(lambda x: n.nvmlDeviceGetPciInfo(x).busId, h),
            "memory": read(n.nvmlDeviceGetMemoryInfo, h),
            "temperature_gpu": read(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
            "power_mw": read(n.nvmlDeviceGetPowerUsage, h),
            "power_limit_mw": read(n.nvmlDeviceGetEnforcedPowerLimit, h),
            "pstate": read(n.nvmlDeviceGetPerformanceState, h),
            "sm_clock_mhz": read(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
            "mem_clock_mhz": read(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
            "utilization": read(n.nvmlDeviceGetUtilizationRates, h),
            "compute_mode": read(n.nvmlDeviceGetComputeMode, h),
            "energy_mj": read(n.nvmlDeviceGetTotalEnergyConsumption, h),
        })
    out["devices"] = devices
    n.nvmlShutdown()
    return out


def main(path: str) -> int:
    capture = {
        "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"kernel": platform.release(), "machine": platform.machine(),
                 "python": platform.python_version(), "nvidia_dev": sorted(glob.glob("/dev/nvidia*"))},
        "commands": {key: run(argv) for key, argv in COMMANDS},
        "nvml": nvml(),
    }
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(capture, fh, indent=1, sort_keys=True)
    for key, res in capture["commands"].items():
        first = (res["stdout"] or res["stderr"]).strip().splitlines()[:1]
        print(f"{key:26} rc={res['rc']} {first[0][:100] if first else ''}")
    print("nvml:", json.dumps(capture["nvml"])[:600])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get("OUT", "."), "capture.json")))
