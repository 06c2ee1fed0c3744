"""The accelerator stack as a host reports it: Neuron devices, the ``aws-neuronx-dkms`` package and module, the
running kernel and whether DKMS built the module for it; NVIDIA GPUs and their driver. The pyinfra facts
(``roles/facts/accelerators.py``: ``NeuronState``, ``NvidiaSmi``) and ``tritonfleet compat`` over SSH run the
same commands and parse their output here. Pure: no pyinfra, no SSH.

Whether DKMS built the driver for the running kernel (``dkms_built``): ``dkms status`` lists the Neuron module
(``aws-neuronx/2.30.2.0, 6.8.0-1015-aws, x86_64: installed``; dkms 2 spells it ``aws-neuronx, 2.30.2.0, ...``)
for that kernel as ``installed`` or ``built``: True; dkms is there but lists no such line: False; no dkms on
the host: True when a ``neuron.ko*`` is under ``/lib/modules/$(uname -r)`` (where ``dkms install`` puts it), else
False: an installed driver with no module for the running kernel anywhere is not built for it. A loaded
module of the package's version is built for the running kernel, whatever dkms lists: True. None when no
driver package is installed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

#: The NeuronState command: one shell line, each part's output after an ``@<part>`` line.
NEURON_COMMAND = (
    "echo '@devices'; ls -1 /dev 2>/dev/null | grep -E '^neuron[0-9]+$'; "
    "echo '@pkg'; (dpkg-query -W -f='${Version}\\n' aws-neuronx-dkms 2>/dev/null "
    "|| rpm -q --qf '%{VERSION}\\n' aws-neuronx-dkms 2>/dev/null) | grep -v 'not installed'; "
    "echo '@module'; test -d /sys/module/neuron && echo yes; "
    "echo '@loaded'; cat /sys/module/neuron/version 2>/dev/null; "
    "echo '@headers'; r=$(uname -r); (test -e /lib/modules/$r/build || test -d /usr/src/linux-headers-$r "
    "|| test -d /usr/src/kernels/$r) && echo yes; "
    "echo '@kernel'; echo \"$r\"; "
    "echo '@dkms'; if command -v dkms >/dev/null 2>&1; then echo '(dkms)'; dkms status 2>/dev/null "
    "| grep -i neuron; fi; "
    "echo '@modfile'; find /lib/modules/$r -name 'neuron.ko*' 2>/dev/null | head -n 1; "
    "echo '@neuronls'; if test -x /opt/aws/neuron/bin/neuron-ls; then /opt/aws/neuron/bin/neuron-ls -j 2>&1 "
    "| tr '\\n' ' '; echo; fi; true"
)

#: The NvidiaSmi command: one line per GPU, ``name, memory.total, driver_version`` (nothing without nvidia-smi).
NVIDIA_COMMAND = ("command -v nvidia-smi >/dev/null || exit 0; "
                  "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1; true")

#: The line ``dkms status`` output starts with in :data:`NEURON_COMMAND` when dkms is on the host.
DKMS_PRESENT = "(dkms)"

# dkms 3: "aws-neuronx/2.30.2.0, 6.8.0-1015-aws, x86_64: installed"; dkms 2: "aws-neuronx, 2.30.2.0, 6.8.0, x86_64: ..."
_DKMS_LINE = re.compile(
    r"^(?P<module>[^/,:\s]+)(?:/|,\s*)(?P<version>[^,:\s]+)(?:,\s*(?P<kernel>[^,:\s]+))?(?:,\s*(?P<arch>[^:\s]+))?"
    r":\s*(?P<status>.+)$")
_NUMBERS = re.compile(r"\d+(?:\.\d+)*")


def sections(output: Iterable[str], marker: str = "@", strip: bool = True) -> dict[str, list[str]]:
    """Split command output into sections: a line ``<marker>name`` starts section ``name``; blank lines
    dropped, lines stripped unless ``strip`` is False (the facts of ``roles/facts/`` use it too)."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in output:
        if line.startswith(marker):
            current = line[len(marker):].strip()
            out[current] = []
        elif line.strip():
            out.setdefault(current, []).append(line.strip() if strip else line)
    return out


def _same_version(a: str, b: str) -> bool:
    """``2.30.2.0`` and ``2.30.2.0-dkms`` (or an epoch) name the same version: their dotted numbers agree."""
    na, nb = _NUMBERS.search(a.split(":", 1)[-1]), _NUMBERS.search(b.split(":", 1)[-1])
    return bool(na and nb and na.group(0) == nb.group(0))


def dkms_built(kernel: str | None, driver: str | None, dkms_lines: list[str], modfile: list[str],
               loaded: str | None = None) -> bool | None:
    """Whether the Neuron module of ``driver`` (the installed package's version) is built for ``kernel`` (the
    module docstring says how; a loaded module of that version, ``loaded``, is built for it whatever dkms
    says); None when no driver is installed or the kernel is unknown."""
    if not driver or not kernel:
        return None
    if loaded and _same_version(loaded, driver):
        return True
    if DKMS_PRESENT in dkms_lines:
        for line in dkms_lines:
            m = _DKMS_LINE.match(line.strip())
            if not m or "neuron" not in m.group("module").lower() or m.group("kernel") != kernel:
                continue
            status = m.group("status").strip().lower()
            if (status.startswith("installed") or status.startswith("built")) \
                    and _same_version(m.group("version"), driver):
                return True
        return False
    return bool(modfile)


def parse_neuron(output: Iterable[str]) -> dict[str, Any]:
    """The NeuronState value of :data:`NEURON_COMMAND`'s output lines.

    ``devices``: indices of ``/dev/neuronN`` nodes; ``neuron_ls``: parsed ``neuron-ls -j`` (or None) and
    ``neuron_ls_error``; ``driver_package``: installed aws-neuronx-dkms version; ``driver_loaded``: the loaded
    module's version where the kernel exposes it, else None; ``module_loaded``; ``headers``: whether headers
    for the running kernel are installed; ``kernel``: ``uname -r``; ``dkms_built``: :func:`dkms_built`."""
    parts = sections(output)
    neuron_ls: Any = None
    error = None
    raw = " ".join(parts.get("neuronls", []))
    if raw:
        try:
            neuron_ls = json.loads(raw)
        except ValueError:
            error = raw[:300]
    pkg = parts.get("pkg") or []
    loaded = parts.get("loaded") or []
    kernel_lines = parts.get("kernel") or []
    kernel = kernel_lines[0] if kernel_lines else None
    driver = pkg[0] if pkg else None
    return {
        "devices": sorted(int(d.removeprefix("neuron")) for d in parts.get("devices", [])
                          if d.removeprefix("neuron").isdigit()),
        "neuron_ls": neuron_ls,
        "neuron_ls_error": error,
        "driver_package": driver,
        "driver_loaded": loaded[0] if loaded else None,
        "module_loaded": bool(parts.get("module")),
        "headers": bool(parts.get("headers")),
        "kernel": kernel,
        "dkms_built": dkms_built(kernel, driver, parts.get("dkms") or [], parts.get("modfile") or [],
                                 loaded[0] if loaded else None),
    }


def parse_nvidia(output: Iterable[str]) -> dict[str, Any]:
    """The NvidiaSmi value of :data:`NVIDIA_COMMAND`'s output lines: ``gpus`` (one line per GPU), ``error``
    (nvidia-smi's failure line) and ``driver``: the NVIDIA driver version (the first GPU's), None when
    unknown."""
    lines = [line.strip() for line in output if line.strip()]
    if lines and "NVIDIA-SMI has failed" in lines[0]:
        return {"gpus": [], "error": lines[0], "driver": None}
    return {"gpus": lines, "error": None, "driver": gpu_driver(lines)}


def gpu_driver(gpus: list[str]) -> str | None:
    """The driver version of :data:`NVIDIA_COMMAND`'s GPU lines (their last cell), None when none reads as one."""
    for line in gpus:
        cell = line.rsplit(",", 1)[-1].strip()
        if re.fullmatch(r"\d+(?:\.\d+)+", cell):
            return cell
    return None


def nvidia_default() -> dict[str, Any]:
    """The NvidiaSmi value when nvidia-smi printed nothing (it is not on the host)."""
    return {"gpus": [], "error": "nvidia-smi not found", "driver": None}

