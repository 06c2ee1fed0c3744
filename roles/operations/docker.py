"""Docker images: present by loading an archive, pulling or building."""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping

from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation

from roles.facts.docker import DockerState


@operation()
def docker_image(image: str, source: str, archive: str | None = None, build_dir: str | None = None,
                 context_files: Mapping[str, str] | None = None):
    """
    Make ``image`` present: ``docker load`` an archive, ``docker pull`` it, or build it from ``build_dir``.

    + image: image reference (a content-hash tag for built images)
    + source: archive | pull | build
    + archive: path of a ``docker save`` tarball on the host (source=archive)
    + build_dir: directory on the host with the Dockerfile (source=build)
    + context_files: build-context name -> host file copied in before the build (e.g. repository keys)
    """
    if image in host.get_fact(DockerState, images=(image,))["images"]:
        host.noop(f"image {image} present")
        return
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
