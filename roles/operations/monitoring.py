"""Exporter containers (the DCGM exporter): one container by name, recreated only when its spec changes."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from roles.facts.docker import NamedContainers
from tritonfleet import hostcontract as hc


@operation()
def exporter_container(container: str, image: str | None = None, run_args: list[str] | None = None,
                       spec_hash: str | None = None, present: bool = True):
    """
    A long-running exporter container, (re)created when it is missing, stopped, or its spec label differs;
    or removed (``present=False``).

    + container: container name
    + image: image reference
    + run_args: ``docker run`` arguments before the image (ports, devices, restart policy)
    + spec_hash: label value that identifies the spec (image and arguments)
    + present: False removes the container

    **Examples:**

    .. code:: python

        monitoring.exporter_container(
            name="DCGM exporter container",
            container="tritonfleet-dcgm-exporter",
            image="nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",
            run_args=["--restart", "unless-stopped", "--gpus", "all", "-p", "127.0.0.1:9400:9400"],
            spec_hash="5d41402abc4b2a76",
        )

        monitoring.exporter_container(
            name="DCGM exporter container removed",
            container="tritonfleet-dcgm-exporter",
            present=False,
        )
    """
    have = host.get_fact(NamedContainers, names=(container,)).get(container)
    q = shlex.quote
    if not present:
        if have is None:
            host.noop(f"{container} absent")
            return
        yield f"docker rm -f {q(container)} >/dev/null"
        return
    if have is not None and have["running"] and have["spec"] == spec_hash:
        host.noop(f"{container} running with its spec")
        return
    args = " ".join(q(a) for a in (run_args or []))
    if have is not None:
        yield f"docker rm -f {q(container)} >/dev/null"
    yield (f"docker run -d --name {q(container)} --label {q(f'{hc.LABEL_SPEC}={spec_hash}')} {args} {q(image or '')} "
           f">/dev/null")
