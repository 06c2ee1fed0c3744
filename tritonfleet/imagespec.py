"""The Triton image a host's data names, and what its labels declare (pure: no pyinfra).

On Neuron hosts with ``triton_image_source: build`` the image is built from ``templates/triton/Dockerfile.neuron.j2``
and its tag is the Dockerfile's content hash (:func:`image_ref`), so one tag is one set of pinned packages. The
Dockerfile labels the image with the ``aws-neuronx-runtime-lib`` it installs (:data:`hostcontract.LABEL_IMAGE_RUNTIME`)
and its framework pins (:data:`hostcontract.LABEL_IMAGE_FRAMEWORKS`). ``roles/triton_image.py`` builds it on the
hosts; ``tritonfleet compat`` computes the same name to inspect it over SSH. ``cfg`` is a validated
:class:`~tritonfleet.config.HostConfig` (the neuron and triton roles' settings, the instance type).
"""

from __future__ import annotations

import hashlib
from typing import Any

from tritonfleet import compat
from tritonfleet import hostcontract as hc
from tritonfleet.templating import render

#: The Neuron package repository's id (its keyring and sources file are named after it).
NEURON_REPO = "neuron"
#: Repository name of the images tritonfleet builds on Neuron hosts (the tag is a content hash).
BUILT_IMAGE = "tritonfleet/tritonserver-neuron"


def keyring_file_name(repo_id: str, family: str) -> str:
    """The key of ``repo_id`` as a file name for another apt (e.g. inside an image build), on a host of package
    ``family`` (``apt``: the binary keyring, ``.gpg``; ``dnf``: the armored key, ``.asc``; apt's signed-by reads
    both by extension)."""
    return f"{repo_id}-archive-keyring." + ("gpg" if family == "apt" else "asc")


def frameworks(cfg: Any) -> list[str]:
    """The pip packages baked into the host's Neuron image: ``triton_neuron_frameworks``, else the family's
    :data:`compat.FRAMEWORK_PINS`."""
    if cfg.triton.neuron_frameworks:
        return list(cfg.triton.neuron_frameworks)
    return list(compat.FRAMEWORK_PINS["inf1" if cfg.instance.runtime_in_framework else "neuronx"])


def _label_value(text: str) -> str:
    """``text`` inside a Dockerfile LABEL's double quotes (backslash, quote and ``$`` escaped)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")


def built_runtime(cfg: Any) -> str | None:
    """The ``aws-neuronx-runtime-lib`` the built image installs (the release's pin), None when it installs none
    (inf1: the runtime ships inside the framework)."""
    if cfg.instance.runtime_in_framework:
        return None
    return cfg.neuron.versions().get(compat.RUNTIME_LIB)


def dockerfile(cfg: Any, key_file: str = keyring_file_name(NEURON_REPO, "apt")) -> str:
    """The Neuron Triton image's Dockerfile for the host (``key_file``: :func:`keyring_file_name` on its
    platform)."""
    versions = cfg.neuron.versions()
    runtime_packages = []
    if not cfg.instance.runtime_in_framework:
        for pkg in (compat.RUNTIME_LIB, compat.COLLECTIVES):
            if pkg in versions:
                runtime_packages.append(f"{pkg}={compat.version_pin(versions[pkg])}")
    pins = frameworks(cfg)
    return render(
        "triton/Dockerfile.neuron.j2", base_image=cfg.triton.base_image, apt_url=cfg.neuron.apt_url,
        runtime_packages=runtime_packages, pip_index=cfg.triton.neuron_pip_index, frameworks=pins,
        # the labels state what the image really installs (the release pin), never a data override
        runtime_version=versions.get(compat.RUNTIME_LIB) if runtime_packages else None,
        sdk_release=cfg.neuron.sdk_release, family=cfg.instance.neuron_arch or cfg.instance.family,
        key_file=key_file, label=hc.LABEL_IMAGE_RUNTIME,
        frameworks_label=hc.LABEL_IMAGE_FRAMEWORKS, frameworks_value=_label_value(hc.frameworks_label(pins)),
    )


def image_source(cfg: Any) -> str:
    """GPU hosts have nothing to build: "build" means pulling the NGC base image there."""
    if cfg.triton.image_source == "build" and not cfg.instance.is_neuron:
        return "pull"
    return str(cfg.triton.image_source)


def image_ref(cfg: Any, key_file: str = keyring_file_name(NEURON_REPO, "apt")) -> str:
    """The base image: ``triton_image``, the NGC image on GPU hosts or the Neuron build's tag (the image the
    containers run may be a python-packages layer on it, which keeps its labels)."""
    if cfg.triton.image:
        return str(cfg.triton.image)
    if not cfg.instance.is_neuron:
        return str(cfg.triton.base_image)
    digest = hashlib.sha256(dockerfile(cfg, key_file).encode()).hexdigest()[:16]
    return f"{BUILT_IMAGE}:{digest}"


def runtime_version(cfg: Any) -> str | None:
    """``aws-neuronx-runtime-lib`` inside the Triton image as the data declares it: ``triton_neuron_runtime_version``,
    else (Neuron hosts whose runtime is not inside the framework) the SDK release's."""
    t = cfg.triton
    if not cfg.instance.is_neuron or cfg.instance.runtime_in_framework:
        return t.neuron_runtime_version
    return t.neuron_runtime_version or cfg.neuron.versions().get(compat.RUNTIME_LIB)
