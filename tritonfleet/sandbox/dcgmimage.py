"""The sandbox stand-in for NVIDIA's dcgm-exporter image, written as a ``docker save`` archive by Python.

Layer 1 is the Triton image's slim Debian 12 base (:func:`.image.base_layer`, shared cache: pass the
same ``cache_dir`` as for :func:`.image.build_triton_image` and it is not built twice). Layer 2 holds
the stand-in exporter (``standins/dcgm_exporter.py.in``, run by the base's python3) as
``/usr/bin/dcgm-exporter``, the image's entrypoint script and the collectors CSVs under
``/etc/dcgm-exporter``. Like ``nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04`` it serves
``/metrics`` on ``:9400`` and takes the same options (``-f``, ``-a``, ``-c``, ``-d``, ``-n``, ...).
NOT NVIDIA's image: no DCGM, no NVML; readings are those of an idle GPU.

Cached and reproducible like the Triton image: layers and the archive are rebuilt only when their
inputs change, and the same inputs give the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from tritonfleet import catalog
from tritonfleet.sandbox.dockerarchive import CREATED
from tritonfleet.sandbox.image import (
    BASE_HISTORY,
    archive_unless_current,
    base_layer,
    cached_layer,
)
from tritonfleet.sandbox.standins import DATA_DIR, NVIDIA_DRIVERS

RECIPE_VERSION = "1"
DCGM_VERSION = "3.3.9"
EXPORTER_VERSION = "3.6.1"
DEFAULT_TAG = f"tritonfleet-sandbox/dcgm-exporter:{DCGM_VERSION}-{EXPORTER_VERSION}-sandbox"
ARCHIVE_NAME = f"dcgm-exporter-{DCGM_VERSION}-{EXPORTER_VERSION}-sandbox.tar"
PORT = 9400
ENTRYPOINT = "/usr/local/dcgm/dcgm-exporter-entrypoint.sh"
EXPORTER_PATH = "/usr/bin/dcgm-exporter"
ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: the driver the stand-in reports when the container cannot see one (the default stand-in driver)
DEFAULT_DRIVER = next(iter(NVIDIA_DRIVERS.values()))[0].split("-", 1)[0]
#: catalog device name -> the name NVML reports (as the stand-in nvidia-smi spells it)
MARKETING = {"T4": "Tesla T4", "A100": "NVIDIA A100-SXM4-40GB", "H100": "NVIDIA H100 80GB HBM3"}

_ENTRYPOINT_SH = f"""#!/bin/sh
# SANDBOX STAND-IN entrypoint of the dcgm-exporter image (tritonfleet): runs the stand-in exporter.
exec {EXPORTER_PATH} "$@"
"""

_CSV_HEAD = """# SANDBOX STAND-IN collectors file (tritonfleet), the dcgm-exporter {version} {which} field set.
# Record: DCGM field, Prometheus type (gauge, counter, label), help text. '#' starts a comment.
"""

# (field, type, help) of dcgm-exporter 3.3.9-3.6.1's etc/default-counters.csv (the active lines)
DEFAULT_COUNTERS = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "counter", "Total number of bytes transmitted through PCIe TX via NVML."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "counter", "Total number of bytes received through PCIe RX via NVML."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Frame buffer memory free (in MB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Frame buffer memory used (in MB)."),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes",
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
]

# (field, type, help) of dcgm-exporter 3.3.9-3.6.1's etc/dcp-metrics-included.csv (the active lines):
# the default set without the PROF_PCIE counters, other help texts for FB and NVLink, plus DCP gauges
_DCP_HELP = {
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "Total number of NVLink bandwidth counters for all lanes.",
}
DCP_COUNTERS = [
    (name, prom, _DCP_HELP.get(name, help_text))
    for name, prom, help_text in DEFAULT_COUNTERS
    if not name.startswith("DCGM_FI_PROF_")
]
DCP_COUNTERS += [
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads "
        "- in bytes per second.",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads "
        "- in bytes per second.",
    ),
]


def counters_csv(counters: list[tuple[str, str, str]], which: str) -> bytes:
    lines = [_CSV_HEAD.format(version=f"{DCGM_VERSION}-{EXPORTER_VERSION}", which=which)]
    lines += [f"{name}, {prom}, {help_text}\n" for name, prom, help_text in counters]
    return "".join(lines).encode()


def model_name(device_name: str) -> str:
    """The NVML name of a catalog GPU (``T4`` -> ``Tesla T4``, ``A10G`` -> ``NVIDIA A10G``)."""
    if device_name in MARKETING:
        return MARKETING[device_name]
    return device_name if device_name.startswith(("NVIDIA", "Tesla")) else f"NVIDIA {device_name}"


def framebuffer_table() -> dict[str, int]:
    """``{modelName: framebuffer MiB}`` of every GPU in the instance catalog."""
    table: dict[str, int] = {}
    for it in catalog.CATALOG.values():
        if it.is_gpu:
            table.setdefault(model_name(it.device_name), it.device_memory_mib)
    return dict(sorted(table.items()))


def exporter_script(driver_version: str = DEFAULT_DRIVER) -> str:
    """The stand-in exporter, ``standins/dcgm_exporter.py.in`` with its placeholders filled."""
    text = (DATA_DIR / "dcgm_exporter.py.in").read_text(encoding="utf-8")
    values = {
        "EXPORTER_VERSION": EXPORTER_VERSION,
        "DCGM_VERSION": DCGM_VERSION,
        "DRIVER_VERSION": driver_version,
        "FB_TABLE": json.dumps(framebuffer_table(), sort_keys=True),
    }
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    leftover = re.findall(r"@@[A-Z_]+@@", text)
    if leftover:
        raise ValueError(f"unfilled placeholders in dcgm_exporter.py.in: {sorted(set(leftover))}")
    return text


def dcgm_layer_entries(driver_version: str = DEFAULT_DRIVER) -> list[tuple[str, bytes | None, int]]:
    """(path in image, content or None for a directory, mode), parents before children."""
    sandbox_note = (
        f"tritonfleet sandbox image: a stand-in for NVIDIA dcgm-exporter {DCGM_VERSION}-{EXPORTER_VERSION} "
        "(python; no DCGM, no NVML). NOT NVIDIA's image.\n"
    )
    return [
        ("etc", None, 0o755),
        ("etc/dcgm-exporter", None, 0o755),
        ("etc/dcgm-exporter/SANDBOX", sandbox_note.encode(), 0o644),
        (
            "etc/dcgm-exporter/dcp-metrics-included.csv",
            counters_csv(DCP_COUNTERS, "dcp-metrics-included"),
            0o644,
        ),
        ("etc/dcgm-exporter/default-counters.csv", counters_csv(DEFAULT_COUNTERS, "default-counters"), 0o644),
        ("usr", None, 0o755),
        ("usr/bin", None, 0o755),
        (EXPORTER_PATH.lstrip("/"), exporter_script(driver_version).encode(), 0o755),
        ("usr/local", None, 0o755),
        ("usr/local/dcgm", None, 0o755),
        (ENTRYPOINT.lstrip("/"), _ENTRYPOINT_SH.encode(), 0o755),
    ]


def dcgm_layer(cache_dir: Path, driver_version: str = DEFAULT_DRIVER) -> tuple[Path, str]:
    """(layer tar, diff_id hex) of layer 2 (the exporter); cached by its content."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    entries = dcgm_layer_entries(driver_version)
    h = hashlib.sha256(f"dcgm\0{RECIPE_VERSION}\0".encode())
    for path, data, mode in entries:
        h.update(f"{path}\0{mode:o}\0".encode())
        if data is not None:
            h.update(hashlib.sha256(data).digest())
    return cached_layer(cache_dir / f"dcgm-layer-{h.hexdigest()[:16]}.tar", entries,
                        {"dcgm_exporter": f"{DCGM_VERSION}-{EXPORTER_VERSION}"}, "dcgm-layer-*")


def image_config(diff_ids: list[str], tag: str) -> dict:
    """The image config JSON (``docker image inspect`` shows its ``config`` part)."""
    labels = {
        "org.opencontainers.image.title": (
            f"tritonfleet sandbox dcgm-exporter {DCGM_VERSION}-{EXPORTER_VERSION} stand-in (NOT NVIDIA's image)"
        ),
        "org.opencontainers.image.version": f"{DCGM_VERSION}-{EXPORTER_VERSION}",
        "com.tritonfleet.sandbox": "true",
    }
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": CREATED,
        "author": "tritonfleet sandbox",
        "config": {
            # as NVIDIA's image, except NVIDIA_VISIBLE_DEVICES: only --gpus sets it (see the exporter)
            "Env": [
                f"PATH={ENV_PATH}",
                "NVIDIA_DRIVER_CAPABILITIES=compute,utility,compat32",
                "NVIDIA_DISABLE_REQUIRE=true",
                "NO_SETCAP=",
            ],
            "Entrypoint": [ENTRYPOINT],
            "ExposedPorts": {f"{PORT}/tcp": {}},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in diff_ids]},
        "history": [
            BASE_HISTORY,
            {
                "created": CREATED,
                "created_by": f"tritonfleet sandbox: dcgm-exporter stand-in {DCGM_VERSION}-{EXPORTER_VERSION} "
                f"(image {tag})",
            },
        ],
    }


def build_dcgm_image(
    cache_dir: Path,
    out: Path,
    *,
    tag: str = DEFAULT_TAG,
    base_tar: Path | None = None,
    driver_version: str = DEFAULT_DRIVER,
) -> Path:
    """Build (or confirm) the sandbox dcgm-exporter image archive at ``out``; returns ``out``.

    ``cache_dir`` keeps the layer tars (the shared ``base-layer-*.tar``, ``dcgm-layer-*.tar``) and the
    archive stamps; nothing is rebuilt when the inputs are unchanged. ``base_tar`` replaces the
    mmdebstrap rootfs with a given tarball (tests). ``driver_version`` is what the exporter reports
    when the container shows no NVIDIA driver.
    """
    cache_dir, out = Path(cache_dir), Path(out)
    layers = [base_layer(cache_dir, base_tar), dcgm_layer(cache_dir, driver_version)]
    config = image_config([d for _, d in layers], tag)
    return archive_unless_current(out, layers, config, tag, cache_dir / "dcgm-archives.json", RECIPE_VERSION)
