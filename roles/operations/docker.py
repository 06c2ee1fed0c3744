"""Docker images: present by loading an archive, pulling or building."""

from __future__ import annotations

import logging
import posixpath
import shlex
from collections.abc import Callable, Mapping
from typing import Any, cast

from pyinfra import host
from pyinfra import logger as pyinfra_logger
from pyinfra.api import FunctionCommand, OperationError, StringCommand, operation
from pyinfra.api.arguments import ConnectorArguments
from pyinfra.api.util import print_host_combined_output

from roles.facts.docker import DockerState
from roles.operations.common import fail
from tritonfleet import pyreqs

logger = logging.getLogger(__name__)

#: the build's output on the host (``build_dir/build.log``) with ``pip_log``
BUILD_LOG = "build.log"


class ExplainedCommand(FunctionCommand):
    """A shell command whose failure adds the lines ``explain`` finds in its output: it runs through the
    controller (the output never leaves the host otherwise), with the operation's connector arguments (sudo,
    ...); each line is an ``ERROR:`` line on stderr, as :func:`roles.operations.common.fail` prints them.
    ``warn``: the lines of its output shown as warnings (with the host's name) when it succeeds, which would
    otherwise never be seen."""

    def __init__(self, command: StringCommand, explain: Callable[[str], list[str]],
                 warn: Callable[[str], list[str]] | None = None) -> None:
        super().__init__(self._run, (), {})
        self.command, self.explain, self.warn = command, explain, warn
        self.connector_arguments = cast(ConnectorArguments, dict(command.connector_arguments))  # its stdin

    def __repr__(self) -> str:
        return f"ExplainedCommand({self.command!r})"

    def _run(self) -> bool:  # pragma: no cover - execute() runs it
        raise NotImplementedError

    def execute(self, state, host, connector_arguments: ConnectorArguments) -> bool:
        status, output = self.command.execute(state, host, cast(ConnectorArguments, dict(connector_arguments)))
        if status is not False:
            for line in self.warn(output.output) if self.warn else ():
                pyinfra_logger.warning(f"{host.print_prefix}{line}")
            return True
        if not state.print_output:
            print_host_combined_output(host, output)
        arguments: dict[str, Any] = {k: v for k, v in connector_arguments.items() if k != "_stdin"}
        for line in self.explain(output.output):
            host.run_shell_command(fail(line), print_output=True, **arguments)
        return False


def explained(command: StringCommand, explain: Callable[[str], list[str]],
              warn: Callable[[str], list[str]] | None = None) -> ExplainedCommand:
    """``command``, failing with the lines ``explain`` finds in its output besides its own (succeeding, with the
    lines ``warn`` finds shown as warnings)."""
    return ExplainedCommand(command, explain, warn)


def pip_build_failure(output: str) -> list[str]:
    """The one line of a failed python_requirements build (the package and pip's reason)."""
    return [f"python packages (triton_python_requirements) did not install: {pyreqs.pip_failure(output)}; "
            "the running servers are unchanged"]


@operation()
def image(image: str, source: str, archive: str | None = None, build_dir: str | None = None,
          context_files: Mapping[str, str] | None = None, pip_log: bool = False):
    """
    Make ``image`` present: ``docker load`` an archive, ``docker pull`` it, or build it from ``build_dir``.

    + image: image reference (a content-hash tag for built images)
    + source: archive | pull | build
    + archive: path of a ``docker save`` tarball on the host (source=archive)
    + build_dir: directory on the host with the Dockerfile (source=build)
    + context_files: build-context name -> host file copied in before the build (e.g. repository keys)
    + pip_log: the build installs python packages: its output goes to ``build_dir/build.log`` on the host, and
      a failure is one line naming the package and pip's reason (:func:`tritonfleet.pyreqs.pip_failure`)

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
        if not pip_log:
            yield f"DOCKER_BUILDKIT=0 docker build -q -t {q(image)} {q(build_dir or '')}"
            return
        log = q(posixpath.join(build_dir or "", BUILD_LOG))
        yield explained(StringCommand(
            f"DOCKER_BUILDKIT=0 docker build -t {q(image)} {q(build_dir or '')} >{log} 2>&1 "
            f"|| {{ tail -n 400 {log}; exit 1; }}"), pip_build_failure)
    else:
        raise OperationError(f"unknown image source {source!r}")
