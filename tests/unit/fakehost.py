"""Run a role against a pyinfra ``@fake`` host (API mode) and record every command and upload."""

from __future__ import annotations

import io
import re

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.operations import run_ops
from pyinfra.connectors.fake import FakeConnector

OS_RELEASE = {
    "ubuntu2204": ("Ubuntu", "22.04", "jammy", "ubuntu"),
    "ubuntu2404": ("Ubuntu", "24.04", "noble", "ubuntu"),
    "debian12": ("Debian GNU/Linux", "12", "bookworm", "debian"),
    "al2023": ("Amazon Linux", "2023", "", "amzn"),
}


def neuron_state(devices: int, driver: str = "2.30.2.0") -> list[str]:
    """Output of the NeuronState fact on a healthy host with ``devices`` Neuron devices."""
    return (["@devices"] + [f"neuron{i}" for i in range(devices)] + ["@pkg", driver, "@module", "@loaded",
            "@headers", "yes", "@neuronls"])


def responses(os_key: str, *, kernel: str = "6.8.0-1015-aws", installed: str = "", devices: int = 0) -> dict:
    name, version, codename, os_id = OS_RELEASE[os_key]
    release = [
        "/etc/os-release", f'NAME="{name}"', f'VERSION_ID="{version}"', f"ID={os_id}",
        f"VERSION_CODENAME={codename}", "---",
    ]
    family = "dnf" if os_key == "al2023" else "apt"
    return {
        "@devices": neuron_state(devices) if devices else [],  # NeuronState (checks act at execute time)
        "command -v apt-get": family,
        "-release": release,
        "uname -r": kernel,
        "dpkg -l": installed,
        re.compile(r"rpm --queryformat"): installed,
    }


class Recorder:
    def __init__(self) -> None:
        self.commands: list[str] = []
        self.uploads: dict[str, str] = {}
        self.failures: list[str] = []


def run_role(deploy_fn, data: dict, os_key: str, monkeypatch, **resp) -> Recorder:
    rec = Recorder()
    orig_run = FakeConnector.run_shell_command
    orig_put = FakeConnector.put_file

    def run_shell_command(self, command, *args, **kwargs):
        rec.commands.append(str(command.get_raw_value() if hasattr(command, "get_raw_value") else command))
        return orig_run(self, command, *args, **kwargs)

    def put_file(self, filename_or_io, remote_filename, *args, **kwargs):
        if isinstance(filename_or_io, io.IOBase) or hasattr(filename_or_io, "read"):
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
    host_data = {**data, "fake_responses": responses(os_key, **resp), "fake_delay": 0, "fake_delay_jitter": 0}
    inventory = Inventory((["@fake/h1"], host_data))
    state = State(inventory=inventory, config=Config())
    connect_all(state)
    add_deploy(state, deploy_fn)
    run_ops(state)
    disconnect_all(state)
    failed = state.results[inventory.get_host("@fake/h1")].error_ops
    assert failed == 0, f"{failed} operations failed on the fake host"
    # @fake runs every command successfully, so a check that yielded its failure command
    # (roles.operations.fail) would pass unnoticed: make it visible.
    rec.failures = [c for c in rec.commands if c.startswith("echo 'ERROR: ")]
    return rec
