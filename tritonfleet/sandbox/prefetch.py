"""The sandbox cache's slow items, built ahead of the fleet's first ``up`` and side by side: the hosts' Debian base
image (``baseimage.ensure_base``) and the images' base layer (``image.base_layer``), two mmdebstrap runs of a minute
or two each on an empty cache (README "The sandbox").

Standard library only: `make test` and `make demo` start it with the system's python3 (``--background``) before pip
installs the venv, so the two builds run while pip does. Whoever needs an item meanwhile (the ``up``, a test) waits
on its lock (``layout.build_lock``) and then finds it built; an item the prefetch failed to build is built again by
the one that needs it, which then says why. The ``up`` itself calls :func:`prefetch` too, so a plain
``tritonfleet sandbox up`` builds the two side by side as well.

With ``--wheels`` (the venv's Python, once pip is done) it builds instead the host agent's two wheelhouses the
sandbox's first deploys need (``tritonfleet/wheelhouse.py``: the pure one, and the one with the QA extra for the
hosts' Python), which a machine with an empty ``~/.cache`` would otherwise build in its first deploy, and then
downloads the wheels a host booted from user data installs (``boot_host``, under the sandbox's lock otherwise).

Examples:
    python3 -m tritonfleet.sandbox.prefetch               # build both now, in the foreground
    python3 -m tritonfleet.sandbox.prefetch --background  # start that and return (log: <state>/logs/prefetch.log)
    .venv/bin/python -m tritonfleet.sandbox.prefetch --wheels --background
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tritonfleet.sandbox import image, layout
from tritonfleet.sandbox.baseimage import ensure_base
from tritonfleet.sandbox.layout import log


def prefetch(keep: Iterable[str | Path] = ()) -> Path:
    """Build the hosts' base image and the images' base layer side by side (each only when missing); the base
    image's path. ``keep``: older base images still under stopped hosts' disks (``ensure_base``). An error of either
    is raised once both have ended."""
    results: dict[str, object] = {}

    def build(name: str, fn: Callable[[], object]) -> None:
        try:
            results[name] = fn()
        except BaseException as exc:  # re-raised below, in the caller's thread
            results[name] = exc

    layer = threading.Thread(target=build, args=("layer", lambda: image.base_layer(layout.CACHE_DIR / "image-cache")),
                             name="image-base-layer", daemon=True)
    layer.start()
    build("base", lambda: ensure_base(keep=keep))
    layer.join()
    for name in ("base", "layer"):
        if isinstance(results[name], BaseException):
            raise results[name]  # type: ignore[misc]
    return results["base"]  # type: ignore[return-value]


def prefetch_wheels() -> None:
    """The host agent's wheelhouses a sandbox host's deploy uses (pure, and with the QA extra for the hosts' Python
    and this machine), then the wheels a host booted from user data installs (``pypi.fetch_host_wheels``: a bundle's,
    the AWS CLI's); each built once, under its own lock."""
    from tritonfleet import wheelhouse  # the venv's: pip, packaging, jinja2
    from tritonfleet.sandbox import pypi

    wheelhouse.build()
    wheelhouse.build((pypi.HOST_PYTHON, os.uname().machine))
    pypi.fetch_host_wheels(layout.CACHE_DIR / "repo-cache", Path(__file__).resolve().parents[2])


def _stopped_hosts_bases() -> set[str]:
    try:
        return {h.base for h in layout.hosts_from_state(layout.load_state()) if h.base}
    except (OSError, ValueError):
        return set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tritonfleet.sandbox.prefetch",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--background", action="store_true",
                        help="start the build in a session of its own and return; its output goes to the log")
    parser.add_argument("--wheels", action="store_true",
                        help="build the host agent's wheelhouses instead (needs the venv's Python)")
    args = parser.parse_args(argv)
    what = "the host agent's wheelhouses" if args.wheels else "the base image and the image base layer"
    if os.geteuid() != 0:
        log("prefetch: not root, nothing built (the sandbox needs root; its `up` says so)")
        return 0
    logfile = layout.logs_dir() / "prefetch.log"
    if args.background:
        with open(logfile, "a") as out:
            proc = subprocess.Popen([sys.executable, "-m", "tritonfleet.sandbox.prefetch",
                                     *(["--wheels"] if args.wheels else [])], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    cwd=Path(__file__).resolve().parents[2])
        log(f"building {what} in the background (pid {proc.pid}, log: {logfile})")
        return 0
    t0 = time.monotonic()
    log(f"prefetch: {what}: started {time.strftime('%Y-%m-%dT%H:%M:%S')} (cache {layout.CACHE_DIR})")
    try:
        prefetch_wheels() if args.wheels else prefetch(keep=_stopped_hosts_bases())
    except Exception as exc:  # the one that needs the item builds it again, and says why there
        log(f"prefetch: {what} failed after {time.monotonic() - t0:.0f}s: {' '.join(str(exc).split())}")
        return 1
    log(f"prefetch: {what} ready in {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
