"""Checks that the accelerators the instance type promises are there (they act at execute time)."""

from __future__ import annotations

import logging

from pyinfra import host
from pyinfra.api import operation

from roles.facts.accelerators import NeuronState, NvidiaSmi
from roles.facts.system import CommandSucceeds
from roles.operations.common import executing, fail, script

logger = logging.getLogger(__name__)

@operation()
def verify_neuron_devices(instance_type: str, expected: int, headers_package: str):
    """
    Fail with the reason and the fix when the Neuron devices differ from the instance type's.

    Acts at execute time (after the driver install); changes nothing.

    + instance_type: e.g. inf2.24xlarge
    + expected: devices the instance type has
    + headers_package: the kernel headers package for the running kernel (named in the fix)

    **Example:**

    .. code:: python

        accelerators.verify_neuron_devices(
            name="Neuron devices match the instance type",
            instance_type="inf2.24xlarge",
            expected=6,
            headers_package="linux-headers-6.8.0-1015-aws",
        )
    """
    if not executing():
        logger.debug("%s: Neuron device check deferred to execute time", host.name)
        return
    state = host.get_fact(NeuronState)
    found = len(state.get("devices", []))
    if found != expected:
        if found == 0 and not state.get("driver_package"):
            reason = "aws-neuronx-dkms is not installed"
        elif found == 0 and not state.get("headers"):
            reason = f"the neuron driver is not loaded; is {headers_package} installed?"
        elif found == 0:
            reason = (f"the neuron driver is not loaded; is {headers_package} installed? "
                      "(then reinstall aws-neuronx-dkms, or reboot)")
        else:
            reason = "the instance type in host data does not match this machine (check instance_type)"
        yield fail(f"{instance_type} should have {expected} Neuron devices, found {found}: {reason}")
        return
    if state.get("neuron_ls_error"):
        yield fail(f"neuron-ls -j failed: {state['neuron_ls_error']}")
        return
    listed = state.get("neuron_ls")
    if isinstance(listed, list) and len(listed) != expected:
        yield fail(f"{instance_type} should have {expected} Neuron devices, neuron-ls reports {len(listed)}")
        return
    loaded, pkg = state.get("driver_loaded"), state.get("driver_package")
    if loaded and pkg and not pkg.startswith(loaded):
        yield fail(f"the loaded neuron driver is {loaded} but aws-neuronx-dkms {pkg} is installed: "
                   "stop processes using /dev/neuron*, then `rmmod neuron && modprobe neuron` (or reboot)")
        return
    host.noop(f"{found} Neuron devices, driver {pkg}")


@operation()
def verify_gpus(instance_type: str, expected: int):
    """
    Fail when ``nvidia-smi`` does not show the instance type's GPUs (acts at execute time).

    + instance_type: e.g. g5.xlarge
    + expected: GPUs the instance type has

    **Example:**

    .. code:: python

        accelerators.verify_gpus(
            name="GPUs match the instance type",
            instance_type="g5.xlarge",
            expected=1,
        )
    """
    if not executing():
        logger.debug("%s: GPU check deferred to execute time", host.name)
        return
    smi = host.get_fact(NvidiaSmi)
    if smi["error"] or len(smi["gpus"]) != expected:
        yield fail(f"{instance_type} should have {expected} GPUs, nvidia-smi shows {len(smi['gpus'])}: "
                   f"{smi['error'] or 'check the NVIDIA driver'}")
        return
    host.noop(f"{expected} GPUs: {smi['gpus'][0]}")


@operation()
def efa_installer(installer_url: str, signature_url: str, key_url: str, fingerprint: str):
    """
    Install EFA with the AWS installer after verifying its GPG signature against a pinned key.

    + installer_url: aws-efa-installer tarball URL
    + signature_url: detached signature URL
    + key_url: the signing key URL
    + fingerprint: expected key fingerprint

    **Example:**

    .. code:: python

        accelerators.efa_installer(
            name="EFA (installer signature verified)",
            installer_url="https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz",
            signature_url="https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz.sig",
            key_url="https://efa-installer.amazonaws.com/aws-efa-installer.key",
            fingerprint=host.data.efa_key_fingerprint,  # pinned in the inventory
        )
    """
    if host.get_fact(CommandSucceeds, command="test -d /opt/amazon/efa"):
        host.noop("EFA is installed (/opt/amazon/efa)")
        return
    yield script("efa-install.sh", installer_url, signature_url, key_url, fingerprint.replace(" ", "").upper())
