"""Run deploys against a pyinfra ``@fake`` host (API mode) that answers like a healthy host, and record
every command and upload.

``@fake`` reports every command as successful, so a check that yields its failure command
(``roles.operations.common.fail``) would pass unnoticed: :func:`run_deploys` fails on any such command
unless the test names the failures it expects.
"""

from __future__ import annotations

import re

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.operations import run_ops
from pyinfra.connectors.fake import FakeConnector

from roles.preflight import preflight
from tritonfleet import catalog, compat

OS_RELEASE = {
    "ubuntu2204": ("Ubuntu", "22.04", "jammy", "ubuntu"),
    "ubuntu2404": ("Ubuntu", "24.04", "noble", "ubuntu"),
    "debian12": ("Debian GNU/Linux", "12", "bookworm", "debian"),
    "al2023": ("Amazon Linux", "2023", "", "amzn"),
}
PLATFORMS = list(OS_RELEASE)
KERNEL = {"al2023": "6.1.115-126.197.amzn2023.x86_64"}


def neuron_state(devices: int, driver: str | None, kernel: str = "6.8.0-1015-aws",
                 built_for: str | None = None) -> list[str]:
    """Output of the NeuronState fact on a host with ``devices`` Neuron devices and ``driver`` installed, running
    ``kernel``; DKMS built the driver for ``built_for`` (default: the running kernel)."""
    built = [f"aws-neuronx/{driver}, {built_for or kernel}, x86_64: installed"] if driver else []
    return (["@devices"] + [f"neuron{i}" for i in range(devices)] + ["@pkg"] + ([driver] if driver else [])
            + ["@module", "yes", "@loaded", "@headers", "yes", "@kernel", kernel, "@dkms", "(dkms)", *built,
               "@modfile", "@neuronls"])


def healthy(itype: str, os_key: str, *, installed: dict[str, str] | None = None, devices: int | None = None,
            driver: str | None = None, ready: bool = True, kernel: str | None = None,
            built_for: str | None = None) -> dict:
    """``fake_responses`` of a healthy host of type ``itype`` running ``os_key``: the OS, the kernel, the
    devices the instance type has (after the driver install) and a driver that satisfies the default pin, built
    by DKMS for the running kernel (``kernel``: another one; ``built_for``: the kernel DKMS built it for).
    ``installed`` adds packages (name -> version) to the package fact."""
    name, version, codename, os_id = OS_RELEASE[os_key]
    it = catalog.get(itype)
    release = ["/etc/os-release", f'NAME="{name}"', f'VERSION_ID="{version}"', f"ID={os_id}",
               f"VERSION_CODENAME={codename}", "---"]
    if driver is None:
        driver = "2.24.13.0" if it.runtime_in_framework else compat.NEURON_RELEASES[compat.DEFAULT_SDK_RELEASE][compat.DKMS]
    count = it.device_count if devices is None else devices
    kernel = kernel or KERNEL.get(os_key, "6.8.0-1015-aws")
    return {
        "@devices": neuron_state(count, driver, kernel, built_for) if it.is_neuron else [],
        "nvidia-smi --query-gpu": ["NVIDIA A10G, 23028 MiB, 550.90.07"] * (count if it.is_gpu else 0),
        "-release": release,
        "uname -r": kernel,
        "${db:Status-Abbrev}": [f"{n} {v}" for n, v in (installed or {}).items()],
        re.compile(r"/v2/health/ready"): "yes" if ready else "",
    }


class Recorder:
    def __init__(self) -> None:
        self.commands: list[str] = []
        self.uploads: dict[str, str] = {}
        self.failures: list[str] = []

    @property
    def text(self) -> str:
        return "\n".join(self.commands)


def run_deploys(deploys, data: dict, os_key: str, monkeypatch, *, expect_failures: tuple[str, ...] = (),
                responses: dict | None = None, groups: tuple[str, ...] = (), installs_driver: bool | None = None,
                **health) -> Recorder:
    """Preflight plus ``deploys`` (one deploy function or a list) on one @fake host (in ``groups``; a host of
    the lb group runs them the way deploys/lb.py and deploys/monitoring.py do: without an accelerator).
    ``installs_driver``: preflight's (None: whether ``deploys`` has the neuron role, as deploys/serve.py and
    deploys/neuron.py say)."""
    from roles.neuron import neuron

    deploys = list(deploys) if isinstance(deploys, (list, tuple)) else [deploys]
    if installs_driver is None:
        installs_driver = neuron in deploys
    rec = Recorder()
    orig_run = FakeConnector.run_shell_command
    orig_put = FakeConnector.put_file

    def run_shell_command(self, command, *args, **kwargs):
        rec.commands.append(str(command.get_raw_value() if hasattr(command, "get_raw_value") else command))
        return orig_run(self, command, *args, **kwargs)

    def put_file(self, filename_or_io, remote_filename, *args, **kwargs):
        if hasattr(filename_or_io, "read"):
            pos = filename_or_io.tell()
            body = filename_or_io.read()
            filename_or_io.seek(pos)
            rec.uploads[remote_filename] = body.decode() if isinstance(body, bytes) else body
        else:
            with open(filename_or_io) as fh:
                rec.uploads[remote_filename] = fh.read()
        return orig_put(self, filename_or_io, remote_filename, *args, **kwargs)

    monkeypatch.setattr(FakeConnector, "run_shell_command", run_shell_command)
    monkeypatch.setattr(FakeConnector, "put_file", put_file)
    fake = {**(responses or {}), **healthy(data["instance_type"], os_key, **health)}
    host_data = {**data, "fake_responses": fake, "fake_delay": 0, "fake_delay_jitter": 0}
    inventory = Inventory((["@fake/h1"], host_data), **{g: (["@fake/h1"], {}) for g in groups})
    state = State(inventory=inventory, config=Config())
    connect_all(state)
    add_deploy(state, preflight, needs_accelerator="lb" not in groups, installs_driver=installs_driver)
    for fn in deploys:
        add_deploy(state, fn)
    run_ops(state)
    disconnect_all(state)
    failed = state.results[inventory.get_host("@fake/h1")].error_ops
    assert failed == 0, f"{failed} operations failed on the fake host"
    rec.failures = [c for c in rec.commands if c.startswith("echo 'ERROR: ")]
    unexpected = [f for f in rec.failures if not any(e in f for e in expect_failures)]
    missing = [e for e in expect_failures if not any(e in f for f in rec.failures)]
    assert not unexpected and not missing, f"failed checks: {rec.failures}; expected: {list(expect_failures)}"
    return rec


def uploads_and_commands(rec: Recorder) -> str:
    return rec.text + "\n" + "\n".join(rec.uploads.values())


__all__ = ["PLATFORMS", "Recorder", "healthy", "neuron_state", "run_deploys", "uploads_and_commands"]
