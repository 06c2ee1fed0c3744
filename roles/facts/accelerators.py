"""What the host's accelerators look like: Neuron devices, driver and kernel, NVIDIA GPUs and driver.

The commands and their parsing are :mod:`tritonfleet.access.hostprobe`'s, which ``tritonfleet compat`` runs over
SSH too."""

from __future__ import annotations

from pyinfra.api import FactBase

from tritonfleet.access import hostprobe


class NeuronState(FactBase[dict]):
    """Neuron devices and driver as the host sees them.

    ``devices``: indices of ``/dev/neuronN`` nodes; ``neuron_ls``: parsed ``neuron-ls -j`` (or None) and
    ``neuron_ls_error``; ``driver_package``: installed aws-neuronx-dkms version; ``driver_loaded``: the
    loaded module's version where the kernel exposes it (``/sys/module/neuron/version``), else None;
    ``module_loaded``; ``headers``: whether headers for the running kernel are installed; ``kernel``: the running
    kernel (``uname -r``); ``dkms_built``: whether DKMS built the installed driver's module for it (True, False,
    None: no driver package; :func:`tritonfleet.access.hostprobe.dkms_built`).
    """

    @staticmethod
    def default() -> dict:
        return {}

    def command(self) -> str:
        return hostprobe.NEURON_COMMAND

    def process(self, output: list[str]) -> dict:
        return hostprobe.parse_neuron(output)


class NvidiaSmi(FactBase[dict]):
    """GPUs as ``nvidia-smi`` reports them: ``{"gpus": [...], "error": str|None, "driver": str|None}`` (``driver``:
    the NVIDIA driver version)."""

    @staticmethod
    def default() -> dict:
        return hostprobe.nvidia_default()

    def command(self) -> str:
        return hostprobe.NVIDIA_COMMAND

    def process(self, output: list[str]) -> dict:
        return hostprobe.parse_nvidia(output)
