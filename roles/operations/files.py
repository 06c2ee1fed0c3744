"""Files and directories tritonfleet writes on hosts: whole files by content, directory trees by manifest,
and the directories it needs, writable. Each reads one fact for everything it manages."""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import shlex
from collections.abc import Mapping
from io import BytesIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation

from roles.facts.files import FileDigests, TreeDigests
from roles.facts.system import CommandSucceeds
from roles.operations.common import script

logger = logging.getLogger(__name__)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@operation()
def managed(files: Mapping[str, str], mode: str = "644"):
    """
    Whole files with exactly this content and mode (parents created), read with one fact.

    + files: remote path -> content
    + mode: octal mode of every file

    **Example:**

    .. code:: python

        files.managed(
            name="sysctl.d file",
            files={"/etc/sysctl.d/90-tritonfleet.conf": "net.core.somaxconn = 4096\\n"},
            mode="644",
        )
    """
    have = host.get_fact(FileDigests, paths=tuple(sorted(files)))
    changed = [p for p, text in sorted(files.items()) if have.get(p) != (_digest(text.encode()), mode)]
    if not changed:
        host.noop(f"{len(files)} files up to date")
        return
    logger.debug("%s: %d of %d files to write: %s", host.name, len(changed), len(files), ", ".join(changed))
    q = shlex.quote
    for path in changed:
        yield StringCommand(f"mkdir -p {q(posixpath.dirname(path))}")
        yield FileUploadCommand(BytesIO(files[path].encode()), path, remote_temp_filename=None)
        yield StringCommand(f"chmod {mode} {q(path)}")


def _local_tree(src: str, exclude_dirs: tuple[str, ...], exclude_suffixes: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for root, dirs, names in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d not in exclude_dirs)
        for name in sorted(names):
            if name.endswith(exclude_suffixes):
                continue
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, src).replace(os.sep, "/")] = _digest(fh.read())
    return out


@operation()
def sync_tree(src: str, dest: str, exclude_dirs: tuple[str, ...] = ("__pycache__",),
              exclude_suffixes: tuple[str, ...] = (".pyc",)):
    """
    Make the remote directory ``dest`` hold exactly the files of the local directory ``src`` (by sha256):
    changed files are uploaded, files ``src`` lacks are deleted, emptied directories removed.

    + src: local directory
    + dest: remote directory
    + exclude_dirs: directory names not copied
    + exclude_suffixes: file name endings not copied

    **Examples:**

    .. code:: python

        files.sync_tree(
            name="Model repository (staged from the controller)",
            src="models",
            dest="/var/lib/tritonfleet/models-staging",
        )

        # The wheelhouse built on the controller, without the build's completion marker
        files.sync_tree(
            name="Host agent wheelhouse",
            src="/home/deploy/.cache/tritonfleet/wheelhouse/5e0c3b7a91d2f468",
            dest="/opt/tritonfleet/wheelhouse",
            exclude_suffixes=("DONE",),
        )
    """
    local = _local_tree(src, tuple(exclude_dirs), tuple(exclude_suffixes))
    remote = host.get_fact(TreeDigests, path=dest)
    upload = [p for p, d in local.items() if remote.get(p) != d]
    delete = sorted(set(remote) - set(local))
    if not upload and not delete:
        host.noop(f"{dest} matches {src} ({len(local)} files)")
        return
    logger.debug("%s: %s: %d files to upload, %d to delete", host.name, dest, len(upload), len(delete))
    q = shlex.quote
    dirs = sorted({posixpath.dirname(posixpath.join(dest, p)) for p in upload} | {dest})
    yield StringCommand("mkdir -p " + " ".join(q(d) for d in dirs))
    for path in upload:
        yield FileUploadCommand(os.path.join(src, path), posixpath.join(dest, path), remote_temp_filename=None)
    if delete:
        yield StringCommand("rm -f " + " ".join(q(posixpath.join(dest, p)) for p in delete)
                            + f" && find {q(dest)} -mindepth 1 -depth -type d -empty -delete")


@operation()
def secret(path: str, content: str):
    """
    A root-only (0600) file holding a secret: written from standard input, never from an argument, under a
    temporary name made 0600 first (``templates/scripts/secret-file.sh``).

    + path: remote path
    + content: the file's text (the secret)

    **Example:**

    .. code:: python

        files.secret(
            name="Triton repository API header (root only)",
            path="/etc/tritonfleet/repository-header",
            content=f"x-tritonfleet-repository-key: {host.data.triton_repository_secret}\\n",
        )
    """
    have = host.get_fact(FileDigests, paths=(path,))
    if have.get(path) == (_digest(content.encode()), "600"):
        host.noop(f"{path} up to date")
        return
    yield script("secret-file.sh", path, stdin=content)


@operation()
def writable_dirs(paths: list[str]):
    """
    Make sure each directory exists and takes a new file; otherwise fail naming the path (read-only file
    system, full disk, wrong permissions) instead of failing later with an upload traceback.

    + paths: absolute directory paths

    **Example:**

    .. code:: python

        files.writable_dirs(
            name="tritonfleet directories writable",
            paths=["/var/lib/tritonfleet", "/opt/tritonfleet"],
        )
    """
    q = shlex.quote
    probe = " && ".join(f"[ -d {q(p)} ] && [ -w {q(p)} ] && [ \"$(df -P -k {q(p)} | awk 'NR==2 {{print $4}}')\" -gt 1024 ]"
                        for p in paths)
    if host.get_fact(CommandSucceeds, command=probe):
        host.noop(f"writable: {', '.join(paths)}")
        return
    checks = "; ".join(
        f"mkdir -p {q(p)} 2>/dev/null && t=$(mktemp -p {q(p)} .tf-write.XXXXXX 2>/dev/null) && rm -f \"$t\" && "
        f"[ \"$(df -P -k {q(p)} | awk 'NR==2 {{print $4}}')\" -gt 1024 ] || "
        f"{{ echo \"ERROR: {p} is not writable or is full on this host ($(df -P -h {q(p)} 2>/dev/null | awk 'NR==2 "
        f"{{print $4 \" free\"}}'); $(touch {q(p)}/.tf-write 2>&1 | sed 's/^touch: //')); nothing was changed there\" >&2; "
        "exit 1; }"
        for p in paths)
    yield StringCommand(checks)
