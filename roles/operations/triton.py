"""Triton containers: compatibility gate, safe swap with a host record, pruning, health gate."""

from __future__ import annotations

import logging
import shlex

from pyinfra import host
from pyinfra import logger as pyinfra_logger
from pyinfra.api import operation

from roles.facts.accelerators import NeuronState
from roles.facts.docker import DockerState
from roles.facts.system import CommandSucceeds
from roles.operations.common import executing, fail, script
from roles.operations.docker import explained
from tritonfleet import compat, pyreqs
from tritonfleet import hostcontract as hc

logger = logging.getLogger(__name__)


@operation()
def neuron_compat_gate(image: str, runtime_from_data: str | None, neuron_arch: str | None = None):
    """
    Refuse to start Triton when the image's Neuron runtime and the host driver do not go together.

    Acts at execute time; changes nothing. The runtime version comes from the image label
    ``com.tritonfleet.neuron.runtime-lib`` (data overrides when the image has no label). The rule is the chain's
    driver -> runtime link (:func:`tritonfleet.compat.check_driver_runtime_finding`): a failure is its one line
    and fix; what the table cannot judge (an unknown version, no runtime declared) is a warning, printed, and the
    deploy goes on.

    + image: Triton image reference
    + runtime_from_data: aws-neuronx-runtime-lib version from host data, if any
    + neuron_arch: inf1 | inf2 | trn1 | trn2 (inf1 hosts cannot take a newer driver)

    **Example:**

    .. code:: python

        triton.neuron_compat_gate(
            name="Neuron runtime in the image vs host driver",
            image="tritonfleet/tritonserver-neuron:3f9c2a1b7d4e5f60",
            runtime_from_data="2.34.10.0",
            neuron_arch="inf2",
        )
    """
    if not executing():
        logger.debug("%s: compatibility gate for %s deferred to execute time", host.name, image)
        return
    info = host.get_fact(DockerState, images=(image,))["images"].get(image) or {}
    runtime = (info.get("labels") or {}).get(hc.LABEL_IMAGE_RUNTIME) or runtime_from_data
    driver = host.get_fact(NeuronState).get("driver_package")
    if not runtime:
        if neuron_arch == "inf1":  # the runtime ships inside torch-neuron: no runtime-lib to judge
            host.noop("inf1: the image's Neuron runtime is inside its framework; gate skipped")
            return
        warning = (f"host {host.name}: {compat.DRIVER_RUNTIME}: image {image} declares no {compat.RUNTIME_LIB} "
                   "version, so whether the host driver runs it is unknown: label the image "
                   f"({hc.LABEL_IMAGE_RUNTIME}) or set triton_neuron_runtime_version")
        pyinfra_logger.warning(warning)
        host.noop("image declares no Neuron runtime version; gate skipped (warned)")
        return
    if not driver:
        yield fail("no aws-neuronx-dkms on the host: run deploys/neuron.py (the driver goes on the host)")
        return
    finding = compat.check_driver_runtime_finding(driver, runtime, neuron_arch, subject=f"host {host.name}")
    if finding.verdict == compat.FAIL:
        yield fail(str(finding))
        return
    if finding.verdict == compat.WARN:
        pyinfra_logger.warning(f"{host.name}: compatibility warning: {finding.link}: {finding.line}"
                               + (f": {finding.fix}" if finding.fix else ""))
        host.noop(f"runtime {runtime} with driver {driver}: {finding.line} (warned)")
        return
    host.noop(f"runtime {runtime} works with driver {driver}")


@operation()
def container(container: str, image: str, spec_hash: str, run_args: list[str], command: list[str],
              url: str, models: list[str], timeout: int, secret: str | None = None):
    """
    One Triton container, recreated only when its spec (``spec_hash``) or image changes.

    A changed container is swapped without leaving serving worse (``templates/scripts/triton-swap.sh``):
    the old one is kept aside while the new one starts and passes the health gate; if ``docker run``
    fails or the gate does, the old one is put back, started and checked, and the operation fails naming
    what it rolled back to. After a good gate the host record (:mod:`tritonfleet.hostcontract`, 0600,
    secret redacted) is written; its ``previous`` changes only when a different spec replaces the
    current one.

    + container: container name
    + image: image reference
    + spec_hash: hash of everything that defines the container
    + run_args: ``docker run`` options (devices, ulimits, env, ports, mounts, labels)
    + command: tritonserver command line
    + url: the server's HTTP endpoint as seen on the host (health gate)
    + models: models that must be ready
    + timeout: seconds for the health gate (of the new container, then of a restored one)
    + secret: a value kept out of the record and masked in pyinfra's output (the repository secret)

    **Example:**

    .. code:: python

        triton.container(
            name="Triton server triton-0",
            container="triton-0",
            image="tritonfleet/tritonserver-neuron:3f9c2a1b7d4e5f60",
            spec_hash="8d777f385d3dfec8",
            run_args=[
                "--restart", "unless-stopped", "--device", "/dev/neuron0",
                "-p", "127.0.0.1:8000:8000", "-v", "/opt/tritonfleet/models:/models",
                "--label", "com.tritonfleet.spec=8d777f385d3dfec8",
            ],
            command=["tritonserver", "--model-repository=/models", "--model-control-mode=explicit"],
            url="http://127.0.0.1:8000",
            models=[],
            timeout=180,
            secret=host.data.triton_repository_secret,
        )
    """
    name = container
    docker = host.get_fact(DockerState, images=(image,))
    current = docker["containers"].get(name)
    image_id = (docker["images"].get(image) or {}).get("id")
    record = hc.ServerRecord(name=name, image=image, spec=spec_hash, run_args=hc.redact(run_args, secret),
                             command=hc.redact(command, secret))
    old = docker["records"].get(name)
    if old is not None:
        record = old.succeeded_by(record)
    if current and current["spec"] == spec_hash and current["running"] and (
            image_id is None or current["image_id"] == image_id):
        # the record is part of "up to date" (rollback and `status --previous` read it): a missing or stale
        # one (deleted, or a run killed between the swap and its write) is written back, 0600
        if old is not None and old.spec == spec_hash:
            host.noop(f"container {name} is up to date")
            return
        logger.debug("%s: container %s is up to date; its host record is missing or stale, written back",
                     host.name, name)
        yield script("secret-file.sh", hc.record_path(name), stdin=record.to_json())
        return
    logger.debug("%s: container %s: %s", host.name, name, "new" if current is None else
                 f"swapped (spec {current['spec']} -> {spec_hash}, image {current.get('image_id')} -> {image_id}, "
                 f"running: {current['running']})")
    # a python model that fails to load at the start on a missing module: one line naming it and the setting
    yield explained(script("triton-swap.sh", name, hc.record_path(name), record.to_json(), url, int(timeout),
                           ",".join(models), "--", *run_args, image, *command, secret=secret), pyreqs.import_hints)


@operation()
def prune(keep: list[str]):
    """
    Remove tritonfleet Triton containers that are no longer placed on this host (they would hold
    devices and ports the new placement needs).

    + keep: container names of the current placement

    **Example:**

    .. code:: python

        triton.prune(
            name="Remove Triton servers no longer placed here",
            keep=["triton-0", "triton-1"],
        )
    """
    stale = sorted(set(host.get_fact(DockerState)["containers"]) - set(keep))
    if not stale:
        host.noop("no stale Triton containers")
        return
    yield "docker rm -f " + " ".join(shlex.quote(n) for n in stale) + " >/dev/null"


@operation()
def ready(container: str, url: str, models: list[str], timeout: int):
    """
    Health gate: wait for ``/v2/health/ready`` and every model's ready state on the host.

    On failure, prints the reason and the first error lines of the container's log. Acts at execute
    time; when the server is already ready it changes nothing.

    + container: container name (for its state and logs)
    + url: base URL as seen on the host, e.g. http://127.0.0.1:8000
    + models: models that must be ready
    + timeout: seconds

    **Example:**

    .. code:: python

        triton.ready(
            name="Triton server triton-0 models ready",
            container="triton-0",
            url="http://127.0.0.1:8000",
            models=["bert_base", "resnet50"],
            timeout=180,
        )
    """
    if not executing():
        logger.debug("%s: health gate of %s deferred to execute time", host.name, container)
        return
    checks = [f"{url}/v2/health/ready"] + [f"{url}/v2/models/{m}/ready" for m in models]
    probe = " && ".join(f"curl -fsS -m 2 -o /dev/null {shlex.quote(c)}" for c in checks)
    if host.get_fact(CommandSucceeds, command=probe):
        host.noop(f"{container} is ready ({len(models)} models)")
        return
    yield explained(script("triton-ready.sh", container, url, int(timeout), *models), pyreqs.import_hints)


@operation()
def models(container: str, url: str, models_dir: str, previous: str, models: list[str], header: str,
           secret: str | None, timeout: int = 180, python_requirements: list[str] | None = None):
    """
    Model gate of a running server in explicit model-control mode: load the models whose files changed
    since the server loaded them (or that are not ready), unload models that left the repository or are
    no longer among ``models`` (the server's own, ``triton_servers[].models``), and
    require every model to be READY, failing with Triton's own reason. The restricted-API header goes to
    the script on stdin, never on a command line.

    + container: container name
    + url: the server's HTTP endpoint as seen on the host
    + models_dir: the host's model repository (mounted at /models)
    + previous: the repository as it was before the last switch (restores a model that fails)
    + models: models that must be ready (the server's models)
    + header: the restricted-API header name
    + secret: its value
    + timeout: seconds to wait for the server itself to be ready (after a reboot, say)
    + python_requirements: the pins built into the image (``triton_python_requirements``); a python model that
      fails on a missing module adds a line naming the model, the module and that setting

    **Example:**

    .. code:: python

        triton.models(
            name="Triton server triton-0 models",
            container="triton-0",
            url="http://127.0.0.1:8000",
            models_dir="/opt/tritonfleet/models",
            previous="/var/lib/tritonfleet/models-previous",
            models=["bert_base", "resnet50"],
            header="x-tritonfleet-repository-key",
            secret=host.data.triton_repository_secret,
            timeout=180,
        )
    """
    if not executing():
        logger.debug("%s: model gate of %s deferred to execute time", host.name, container)
        return
    stamps = hc.loaded_dir(container)
    q = shlex.quote
    # every stamp is of a model still in the repository and, given models, one of them (the gate unloads the
    # others, or drops their stamps)
    mine = f"case \"$s\" in {'|'.join(q(m) for m in models)}) ;; *) exit 1 ;; esac; " if models else ""
    checks = [f"curl -fsS -m 2 -o /dev/null {q(url + '/v2/health/ready')}",
              f"for s in $(ls {q(stamps)} 2>/dev/null); do {mine}[ -d {q(models_dir)}/\"$s\" ] || exit 1; done"]
    for m in models:
        stamp, path = q(f"{stamps}/{m}"), q(f"{models_dir}/{m}")
        checks.append(f"[ -e {stamp} ] && [ -z \"$(find {path} -newer {stamp} -print 2>/dev/null | head -n 1)\" ] "
                      f"&& curl -fsS -m 2 -o /dev/null {q(url + '/v2/models/' + m + '/ready')}")
    if host.get_fact(CommandSucceeds, command=" && ".join(f"( {c} )" for c in checks)):
        host.noop(f"{container}: {len(models)} models loaded and ready")
        return
    listed = pyreqs.parse(python_requirements) if python_requirements else None
    yield explained(script("triton-models.sh", container, url, int(timeout), models_dir, stamps, previous, *models,
                           stdin=f"{header}: {secret or ''}\n"),
                    lambda output: pyreqs.import_hints(output, listed))


@operation(is_idempotent=False)
def refuse(message: str):
    """
    Fail with ``message`` (what cannot be done on this host, said where it would have happened).

    + message: one line

    **Example:**

    .. code:: python

        triton.refuse(
            name="Triton server triton-0 back to spec 8d777f385d3dfec8",
            message="triton-0: the host record holds no spec 8d777f385d3dfec8 to roll back to",
        )
    """
    yield fail(message)
