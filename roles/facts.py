"""Custom pyinfra facts used by the roles (read-only commands; one command per fact)."""

from __future__ import annotations

import json
from shlex import quote
from typing import Any

from pyinfra.api import FactBase


class PackageFamily(FactBase[str]):
    """``apt`` or ``dnf`` (immutable: chosen once per host to pick the per-OS helpers)."""

    @staticmethod
    def default() -> str:
        return "unknown"

    def command(self) -> str:
        return "if command -v apt-get >/dev/null; then echo apt; elif command -v dnf >/dev/null; then echo dnf; fi"

    def process(self, output: list[str]) -> str:
        return output[0].strip()


class KeyringFingerprints(FactBase[list]):
    """OpenPGP fingerprints in a keyring file (empty list when the file is absent)."""

    @staticmethod
    def default() -> list:
        return []

    def command(self, path: str) -> str:
        return (f"! test -s {quote(path)} || gpg --batch --show-keys --with-colons {quote(path)} 2>/dev/null "
                "| awk -F: '/^fpr/{print $10}'")

    def process(self, output: list[str]) -> list:
        return [line.strip().upper() for line in output if line.strip()]


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
        sections: dict[str, list[str]] = {}
        current = ""
        for line in output:
            if line.startswith("@"):
                current = line[1:].strip()
                sections[current] = []
            elif line.strip():
                sections.setdefault(current, []).append(line.strip())
        neuron_ls: Any = None
        error = None
        raw = " ".join(sections.get("neuronls", []))
        if raw:
            try:
                neuron_ls = json.loads(raw)
            except ValueError:
                error = raw[:300]
        pkg = sections.get("pkg") or [None]
        loaded = sections.get("loaded") or [None]
        return {
            "devices": sorted(int(d.removeprefix("neuron")) for d in sections.get("devices", [])),
            "neuron_ls": neuron_ls,
            "neuron_ls_error": error,
            "driver_package": pkg[0],
            "driver_loaded": loaded[0],
            "module_loaded": bool(sections.get("module")),
            "headers": bool(sections.get("headers")),
        }


class DockerImageInfo(FactBase[dict]):
    """``docker image inspect`` of one image: ``{"id": ..., "labels": {...}}`` or {} when absent."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self, image: str) -> str:
        return f"docker image inspect --format '{{{{json .}}}}' {quote(image)} 2>/dev/null || true"

    def process(self, output: list[str]) -> dict:
        text = "".join(output).strip()
        if not text.startswith("{"):
            return {}
        data = json.loads(text)
        return {"id": data.get("Id"), "labels": (data.get("Config") or {}).get("Labels") or {},
                "tags": data.get("RepoTags") or []}


class TritonContainers(FactBase[dict]):
    """Containers labelled as tritonfleet Triton servers: name -> inspect summary."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self) -> str:
        return ("ids=$(docker ps -aq --filter label=com.tritonfleet.role=triton 2>/dev/null); "
                "[ -z \"$ids\" ] || docker inspect $ids")

    def process(self, output: list[str]) -> dict:
        out: dict = {}
        text = "\n".join(output).strip()
        if not text.startswith("["):
            return out
        for c in json.loads(text):
            labels = c["Config"].get("Labels") or {}
            out[c["Name"].lstrip("/")] = {
                "id": c["Id"],
                "image": c["Config"]["Image"],
                "image_id": c["Image"],
                "spec": labels.get("com.tritonfleet.spec"),
                "running": c["State"]["Running"],
                "status": c["State"]["Status"],
                "started_at": c["State"]["StartedAt"],
                "restart_count": c.get("RestartCount", 0),
                "devices": [d["PathOnHost"] for d in c["HostConfig"].get("Devices") or []],
                "env": c["Config"].get("Env") or [],
                "labels": labels,
            }
        return out


class ImdsInstanceType(FactBase[str]):
    """The instance type as IMDS (v2, token first) reports it, or '' when IMDS does not answer."""

    @staticmethod
    def default() -> str:
        return ""

    def command(self, endpoint: str) -> str:
        endpoint = quote(endpoint.rstrip("/"))
        return (f"t=$(curl -fsS -m 3 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' {endpoint}/latest/api/token "
                f"2>/dev/null); curl -fsS -m 3 ${{t:+-H \"X-aws-ec2-metadata-token: $t\"}} "
                f"{endpoint}/latest/meta-data/instance-type 2>/dev/null || true")

    def process(self, output: list[str]) -> str:
        return output[0].strip()


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


class CommandSucceeds(FactBase[bool]):
    """Whether a read-only probe command exits 0."""

    @staticmethod
    def default() -> bool:
        return False

    def command(self, command: str) -> str:
        return f"( {command} ) >/dev/null 2>&1 && echo yes || true"

    def process(self, output: list[str]) -> bool:
        return output[0].strip() == "yes"
