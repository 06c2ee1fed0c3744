"""Docker images: present by loading an archive, pulling or building."""

from __future__ import annotations

import logging
import posixpath
import shlex
from collections.abc import Mapping

from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation

from roles.facts.docker import DockerState

logger = logging.getLogger(__name__)

@operation()
def image(image: str, source: str, archive: str | None = None, build_dir: str | None = None,
          context_files: Mapping[str, str] | None = None):
    """
    Make ``image`` present: ``docker load`` an archive, ``docker pull`` it, or build it from ``build_dir``.

    + image: image reference (a content-hash tag for built images)
    + source: archive | pull | build
    + archive: path of a ``docker save`` tarball on the host (source=archive)
    + build_dir: directory on the host with the Dockerfile (source=build)
    + context_files: build-context name -> host file copied in before the build (e.g. repository keys)

    **Examples:**

    .. code:: python

        # Load an image saved with ``docker save`` (uploaded beforehand)
        docker.image(
            name="Triton image (docker load)",
            image="nvcr.io/nvidia/tritonserver:24.10-py3",
            source="archive",
            archive="/var/lib/tritonfleet/images/tritonserver-24.10-py3.tar",
        )

        # Build the Neuron image from the Dockerfile put in build_dir, with the repository key
        docker.image(
            name="Triton image (build)",
            image="tritonfleet/tritonserver-neuron:3f9c2a1b7d4e5f60",
            source="build",
            build_dir="/var/lib/tritonfleet/build/3f9c2a1b7d4e5f60",
            context_files={"neuron-archive-keyring.gpg": "/etc/apt/keyrings/neuron.gpg"},
        )
    """
    if image in host.get_fact(DockerState, images=(image,))["images"]:
        host.noop(f"image {image} present")
        return
    logger.debug("%s: image %s absent, source %s", host.name, image, source)
    q = shlex.quote
    if source == "archive":
        yield StringCommand(
            f"test -f {q(archive or '')} || {{ echo 'ERROR: image archive {archive} not found on the host' >&2; "
            f"exit 1; }}; docker load -q -i {q(archive or '')} && docker image inspect {q(image)} >/dev/null "
            f"|| {{ echo 'ERROR: {archive} does not contain {image}' >&2; exit 1; }}"
        )
    elif source == "pull":
        yield f"docker pull -q {q(image)}"
    elif source == "build":
        for name, src in (context_files or {}).items():
            yield f"cp {q(src)} {q(posixpath.join(build_dir or '', name))}"
        yield f"DOCKER_BUILDKIT=0 docker build -q -t {q(image)} {q(build_dir or '')}"
    else:
        raise OperationError(f"unknown image source {source!r}")
