"""The Neuron kernel gate in preflight (roles/neuron.py ``kernel_gate``): on @fake hosts, a running kernel the
planned driver is known not to build on, or an installed driver DKMS did not build for the running kernel, is
refused in one line naming the host and the field before any command that changes a host runs; what the table
cannot judge is a printed warning, and the deploy goes on."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import PyinfraError
from pyinfra.connectors.fake import FakeConnector

from roles.agent import agent
from roles.models import models
from roles.neuron import neuron
from tests.fake.fakehost import run_deploys
from tritonfleet import wheelhouse

FPR = "B" * 40
DATA = {"neuron_key_fingerprint": FPR, "triton_repository_secret": "t" * 24, "instance_type": "inf2.xlarge"}
NEW_KERNEL = "6.18.0-1004-aws"
OLD_KERNEL = "6.8.0-1015-aws"
READS = ("echo '@devices'", "cd /etc/ && for file in", "uname", "if command -v dpkg-query", "! test -d ",
         "test -d ", "command -v ", 'if [ -n "$TMPDIR" ]', "cat ")


@pytest.fixture(autouse=True)
def small_wheelhouse(monkeypatch, tmp_path):
    """A stand-in for the controller's wheelhouse (the agent role installs it; tests/unit/test_wheelhouse)."""
    (tmp_path / "tritonfleet_agent-0.1.0+t-py3-none-any.whl").write_text("wheel")
    built = wheelhouse.Wheelhouse(tmp_path, "d" * 64, "0.1.0+t")
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: built)


def _refused(monkeypatch, deploys, data, **health) -> tuple[str, list[str]]:
    """The preflight error of a refused run, and the commands the host got (facts' reads only, if refused)."""
    seen: list[str] = []
    orig = FakeConnector.run_shell_command

    def record(self, command, *args, **kwargs):
        seen.append(str(command.get_raw_value() if hasattr(command, "get_raw_value") else command))
        return orig(self, command, *args, **kwargs)

    monkeypatch.setattr(FakeConnector, "run_shell_command", record)
    with pytest.raises(PyinfraError) as exc:
        run_deploys(deploys, data, "ubuntu2204", monkeypatch, **health)
    return str(exc.value), seen


def _changes(commands: list[str]) -> list[str]:
    return [c for c in commands if not c.lstrip().startswith(READS) and "sys.version_info" not in c]


def test_a_planned_driver_that_does_not_build_on_the_running_kernel_is_refused(monkeypatch):
    """SDK 2.28.0 pins driver 2.26.5.0, which does not build on 6.18 (fixed in 2.26.10.0): the deploy that
    would install it is refused before the install, naming the setting that chose it."""
    text, seen = _refused(monkeypatch, neuron, {**DATA, "neuron_sdk_release": "2.28.0"}, driver="",
                          kernel=NEW_KERNEL)
    assert text.splitlines() == [
        "preflight failed, nothing was changed:",
        "  @fake/h1: neuron_sdk_release '2.28.0': kernel→driver: kernel 6.18.0-1004-aws needs aws-neuronx-dkms "
        "2.26.10.0 or later (older drivers are not compatible with Linux 6.18); this deploy installs 2.26.5.0*: "
        "upgrade aws-neuronx-dkms to 2.26.10.0 or later, or boot a kernel older than 6.18"]
    assert seen and _changes(seen) == []


def test_the_pin_that_chose_the_driver_is_the_field_named(monkeypatch):
    data = {**DATA, "neuron_sdk_release": "2.28.0", "neuron_dkms_version": "2.26.5.0"}
    text, _ = _refused(monkeypatch, neuron, data, driver="", kernel=NEW_KERNEL)
    assert "@fake/h1: neuron_dkms_version '2.26.5.0': kernel→driver: kernel 6.18.0-1004-aws needs" in text


def test_an_installed_driver_not_built_for_the_running_kernel_is_refused_when_the_deploy_keeps_it(monkeypatch):
    """A host rebooted into a new kernel whose headers were missing: DKMS built the driver for the old one only.
    deploys/models.py installs no driver, so it refuses; the host keeps serving what it served."""
    data = {**DATA, "models_s3_uri": "s3://models-bucket/prod"}
    text, seen = _refused(monkeypatch, [agent, models], data, kernel=NEW_KERNEL, built_for=OLD_KERNEL)
    assert text.splitlines()[1] == (
        "  @fake/h1: kernel '6.18.0-1004-aws': kernel→driver: aws-neuronx-dkms 2.30.2.0 is not built for kernel "
        "6.18.0-1004-aws: install the kernel headers (linux-headers-$(uname -r)) and reinstall aws-neuronx-dkms")
    assert _changes(seen) == []


def test_the_same_host_is_refused_by_a_deploy_that_installs_the_same_driver(monkeypatch):
    """deploys/serve.py pins the driver the host has: nothing would rebuild it, so it is refused too."""
    text, _ = _refused(monkeypatch, neuron, DATA, kernel=NEW_KERNEL, built_for=OLD_KERNEL)
    assert "@fake/h1: kernel '6.18.0-1004-aws': kernel→driver: aws-neuronx-dkms 2.30.2.0 is not built" in text


def test_a_deploy_that_installs_another_driver_judges_that_one(monkeypatch):
    """The host's 2.26.10.0 is not built for the new kernel, but deploys/neuron.py installs the release's
    2.30.2.0, which was tested on 6.18: no refusal, the driver is installed."""
    rec = run_deploys(neuron, DATA, "ubuntu2204", monkeypatch, driver="2.26.10.0", kernel=NEW_KERNEL,
                      built_for=OLD_KERNEL)
    assert any("aws-neuronx-dkms=2.30.2.0*" in c for c in rec.commands)


def test_a_healthy_host_passes_without_a_warning(monkeypatch, caplog):
    with caplog.at_level("WARNING"):
        run_deploys(neuron, DATA, "ubuntu2204", monkeypatch)
    assert "compatibility warning" not in caplog.text


def test_what_the_table_cannot_judge_is_a_printed_warning_and_the_deploy_goes_on(monkeypatch, caplog):
    """Kernel 5.15 is not among the kernels driver 2.30.2.0 was tested on: a warning, never a silent pass."""
    with caplog.at_level("WARNING"):
        rec = run_deploys(neuron, DATA, "ubuntu2204", monkeypatch, kernel="5.15.0-1066-aws")
    assert "@fake/h1: compatibility warning: kernel→driver: kernel 5.15 is not one aws-neuronx-dkms 2.30.2.0 " \
           "(Neuron SDK 2.32.0) was tested on" in caplog.text
    assert any("linux-headers-5.15.0-1066-aws" in c for c in rec.commands)


def test_no_driver_and_a_deploy_that_installs_none_is_a_warning(monkeypatch, caplog):
    data = {**DATA, "models_s3_uri": "s3://models-bucket/prod"}
    with caplog.at_level("WARNING"):
        run_deploys([agent, models], data, "ubuntu2204", monkeypatch, driver="",
                    responses={"sys.version_info": ["3.11", "x86_64", "none"]})
    assert "@fake/h1: compatibility warning: kernel→driver: no aws-neuronx-dkms on the host, and this deploy " \
           "installs none: run deploys/neuron.py (or deploys/serve.py) first" in caplog.text


def test_gpu_hosts_are_not_asked(monkeypatch):
    from roles.nvidia import nvidia

    rec = run_deploys(nvidia, {**DATA, "instance_type": "g5.xlarge", "nvidia_key_fingerprint": FPR}, "ubuntu2204",
                      monkeypatch)
    assert not any(c.startswith("echo '@devices'") for c in rec.commands)


def test_a_driver_that_needs_a_newer_runtime_than_the_data_declares_is_refused_before_the_driver_changes(
        monkeypatch):
    """Driver 2.29 needs runtime-lib 2.33 or later (the 2.31.0 known issue): a serving deploy that pins it with an
    image declared to hold runtime 2.28 is refused in preflight, naming the runtime setting, before the driver
    (or anything) changes; the other way round (a runtime that needs a newer driver) as before."""
    from roles.triton import triton

    data = {**DATA, "neuron_dkms_version": "2.29.8.0*", "triton_neuron_runtime_version": "2.28.19.0"}
    text, seen = _refused(monkeypatch, [neuron, triton], data, kernel=OLD_KERNEL)
    assert text.splitlines() == [
        "preflight failed, nothing was changed:",
        "  @fake/h1: triton_neuron_runtime_version '2.28.19.0': driver→runtime: aws-neuronx-dkms 2.29.8.0* needs "
        "aws-neuronx-runtime-lib >= 2.33 (Neuron SDK 2.31.0 known issue); the image has 2.28.19.0: rebuild the image "
        "for Neuron SDK 2.31.0 or later (neuron_sdk_release), or keep the host on an older driver"]
    assert _changes(seen) == []
    newer = {**DATA, "neuron_dkms_version": "2.26.10.0*", "triton_neuron_runtime_version": "2.34.10.0"}
    text, _ = _refused(monkeypatch, [neuron, triton], newer, kernel=OLD_KERNEL)
    assert "@fake/h1: triton_neuron_runtime_version '2.34.10.0': driver→runtime: container runtime " \
           "aws-neuronx-runtime-lib 2.34.10.0 (Neuron SDK 2.32.0) needs host driver aws-neuronx-dkms >= 2.30.2.0, " \
           "host has 2.26.10.0*: upgrade the host driver" in text
