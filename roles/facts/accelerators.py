"""What the host's accelerators look like: Neuron devices and driver, NVIDIA GPUs."""

from __future__ import annotations

import json
from typing import Any

from pyinfra.api import FactBase

from roles.facts import sections


class NeuronState(FactBase[dict]):
    """Neuron devices and driver as the host sees them.

    ``devices``: indices of ``/dev/neuronN`` nodes; ``neuron_ls``: parsed ``neuron-ls -j`` (or None) and
    ``neuron_ls_error``; ``driver_package``: installed aws-neuronx-dkms version; ``driver_loaded``: the
    loaded module's version where the kernel exposes it (``/sys/module/neuron/version``), else None;
    ``module_loaded``; ``headers``: whether headers for the running kernel are installed.
    """

    @staticmethod
    def default() -> dict:
        return {}

    def command(self) -> str:
        return (
            "echo '@devices'; ls -1 /dev 2>/dev/null | grep -E '^neuron[0-9]+$'; "
            "echo '@pkg'; (dpkg-query -W -f='${Version}\\n' aws-neuronx-dkms 2>/dev/null "
            "|| rpm -q --qf '%{VERSION}\\n' aws-neuronx-dkms 2>/dev/null) | grep -v 'not installed'; "
            "echo '@module'; test -d /sys/module/neuron && echo yes; "
            "echo '@loaded'; cat /sys/module/neuron/version 2>/dev/null; "
            "echo '@headers'; r=$(uname -r); (test -e /lib/modules/$r/build || test -d /usr/src/linux-headers-$r "
            "|| test -d /usr/src/kernels/$r) && echo yes; "
            "echo '@neuronls'; if test -x /opt/aws/neuron/bin/neuron-ls; then /opt/aws/neuron/bin/neuron-ls -j 2>&1 "
            "| tr '\\n' ' '; echo; fi; true"
        )

    def process(self, output: list[str]) -> dict:
        parts = {k: [v.strip() for v in lines] for k, lines in sections(output, "@").items()}
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
        return {
            "devices": sorted(int(d.removeprefix("neuron")) for d in parts.get("devices", [])),
            "neuron_ls": neuron_ls,
            "neuron_ls_error": error,
            "driver_package": pkg[0] if pkg else None,
            "driver_loaded": loaded[0] if loaded else None,
            "module_loaded": bool(parts.get("module")),
            "headers": bool(parts.get("headers")),
        }


class NvidiaSmi(FactBase[dict]):
    """GPUs as ``nvidia-smi`` reports them: ``{"gpus": [...], "error": str|None}``."""

    @staticmethod
    def default() -> dict:
        return {"gpus": [], "error": "nvidia-smi not found"}

    def command(self) -> str:
        return ("command -v nvidia-smi >/dev/null || exit 0; "
                "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1; true")

    def process(self, output: list[str]) -> dict:
        lines = [line.strip() for line in output if line.strip()]
        if lines and "NVIDIA-SMI has failed" in lines[0]:
            return {"gpus": [], "error": lines[0]}
        return {"gpus": lines, "error": None}
