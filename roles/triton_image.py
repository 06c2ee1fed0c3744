"""The triton role's serving image: the base image (``triton_image``, the NGC image on GPU hosts, or the Neuron
build from ``templates/triton/Dockerfile.j2``), the python-packages layer on it (``triton_python_requirements``,
:mod:`tritonfleet.pyreqs`), and the operations that make them present on a host (load, pull with the ECR
credential helper, build). :mod:`roles.triton` runs the containers on it and re-exports these names."""

from __future__ import annotations

import json
import os
import posixpath
import re
from io import StringIO
from urllib.parse import urlsplit

from pyinfra import host
from pyinfra.operations import files

from roles import operations as ops
from roles import platform
from roles.facts.docker import NamedContainers
from roles.neuron import REPO_ID as NEURON_REPO
from tritonfleet import hostcontract as hc
from tritonfleet import pyreqs
from tritonfleet.config import FieldProblem, HostConfig

# the image's name and Dockerfile are pure (tritonfleet compat computes them too): tritonfleet/imagespec.py
from tritonfleet.imagespec import dockerfile, frameworks, image_ref, image_source  # noqa: F401

ECR_REGISTRY = re.compile(r"^(\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?)/")


def python_requirements(cfg: HostConfig) -> pyreqs.Requirements:
    """``triton_python_requirements`` parsed (a file path is read on the controller, relative to the directory
    pyinfra runs in, like ``triton_image_archive_src``); a bad line is a FieldProblem naming it."""
    value, index = cfg.triton.python_requirements, cfg.triton.pip_index
    if index is not None:
        try:
            pyreqs.check_index_url(index)
        except pyreqs.RequirementsError as exc:  # the message and the value shown carry no credentials
            parts = urlsplit(index)
            shown = parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()
            raise FieldProblem("triton_pip_index", shown, str(exc)) from None
    try:
        return pyreqs.load(value)
    except pyreqs.RequirementsError as exc:
        raise FieldProblem("triton_python_requirements", value, str(exc)) from None


def serving_image(cfg: HostConfig, base: str) -> str:
    """The image the containers run: ``base`` (:func:`image_ref`), or with ``triton_python_requirements`` the
    layer built on it (:func:`pyreqs.image_tag`: a content hash of the base, the index and the pins)."""
    reqs = python_requirements(cfg)
    return pyreqs.image_tag(base, reqs, cfg.triton.pip_index) if reqs else base


def python_image_pending(cfg: HostConfig) -> list[str]:
    """Servers of this host whose running container is to get a new image with python packages in this run
    (``triton_python_requirements`` set, the container's image another): the models role syncs them after the
    swap (:func:`roles.models.models_after_image`), so that a new model needing a new package loads on the image
    that has it, and a failed build leaves the repository as it was."""
    if not python_requirements(cfg):
        return []
    want = serving_image(cfg, image_ref(cfg, platform.keyring_file_name(NEURON_REPO)))
    names = tuple(p.name for p in cfg.triton.placements)
    running = host.get_fact(NamedContainers, names=names) if names else {}
    return sorted(n for n, c in running.items() if c.get("image") != want)


def _python_layer(cfg: HostConfig, base: str, image: str) -> None:
    """Build the python_requirements layer ``image`` on ``base`` (present already): its build context goes to
    BUILD_DIR/<tag>; a failed pip install fails here, before any container is swapped, in one line."""
    reqs = python_requirements(cfg)
    build_dir = posixpath.join(hc.BUILD_DIR, image.rsplit(":", 1)[-1])
    for fname, content in pyreqs.build_context(base, reqs, cfg.triton.pip_index).items():
        files.put(name=f"Triton python packages {fname}", src=StringIO(content), dest=f"{build_dir}/{fname}",
                  mode="644")
    ops.docker.image(name=f"Triton image {image} (python packages: {len(reqs)})", image=image, source="build",
                     build_dir=build_dir, pip_log=True)


def _image(cfg: HostConfig, image: str) -> None:
    t = cfg.triton
    source = image_source(cfg)
    if source == "build":
        key_file = platform.keyring_file_name(NEURON_REPO)
        build_dir = posixpath.join(hc.BUILD_DIR, image.rsplit(":", 1)[-1])
        files.put(name="Neuron Triton Dockerfile", src=StringIO(dockerfile(cfg, key_file)),
                  dest=f"{build_dir}/Dockerfile", mode="644")
        ops.docker.image(name=f"Triton image {image} (build)", image=image, source="build",
                         build_dir=build_dir, context_files={key_file: platform.keyring_path(NEURON_REPO)})
    elif source == "archive":
        archive = t.image_archive
        if t.image_archive_src:
            archive = archive or posixpath.join(hc.IMAGES_DIR, os.path.basename(t.image_archive_src))
            files.put(name="Triton image archive upload", src=t.image_archive_src, dest=archive, mode="644")
        ops.docker.image(name=f"Triton image {image} (docker load)", image=image, source="archive",
                         archive=archive)
    else:
        ecr = ECR_REGISTRY.match(image)
        if ecr and t.ecr_credential_helper:
            _ecr_login(ecr.group(1))
        ops.docker.image(name=f"Triton image {image} (pull)", image=image, source="pull")


def _ecr_login(registry: str) -> None:
    """ECR pulls with the instance profile: no AWS keys on the host, no expiring `docker login`."""
    platform.install("amazon-ecr-credential-helper", ["ecr-credential-helper"])
    files.put(name=f"Docker credential helper for {registry}", dest="/root/.docker/config.json", mode="600",
              src=StringIO(json.dumps({"credHelpers": {registry: "ecr-login"}}, indent=2) + "\n"))
