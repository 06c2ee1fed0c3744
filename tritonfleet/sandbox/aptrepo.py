"""Signed apt repositories (and the EFA installer download) for the sandbox fleet.

Everything lives under one directory that the sandbox serves over HTTP (``http://192.168.250.1:8080/``):

===========================  =======================================================================
``neuron/``                  dists layout like apt.repos.neuron.amazonaws.com: Neuron stand-ins and the
                             ``linux-headers-<uname -r>`` stand-in; key ``neuron/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB``
``nvidia/stable/deb/amd64/`` flat repo like nvidia.github.io/libnvidia-container; key ``nvidia/gpgkey``;
                             ``nvidia/stable/deb/nvidia-container-toolkit.list`` as the real site has it
``debian/``                  dists layout ``bookworm main``: real Debian debs the base image lacks
                             (``docker.io``, ``haproxy``, ``socat`` and dependencies) plus the NVIDIA driver stand-ins
``efa/``                     ``aws-efa-installer-latest.tar.gz`` + ``.sig`` + ``aws-efa-installer.key``
``keyrings/<name>.gpg``      binary public keys for ``signed-by=``
===========================  =======================================================================

Every repository is signed by its own throwaway ed25519 key, generated once into a GNUPGHOME under the
cache directory and reused. Builds are skipped when the inputs (deb contents, key, recipe version) are
unchanged, so :func:`build_all` on a warm cache only hashes files.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tritonfleet.sandbox import standins
from tritonfleet.sandbox.debfetch import ARCH, fetch_debian_debs
from tritonfleet.sandbox.fsutil import SOURCE_DATE_EPOCH, sha256_file, write_atomic
from tritonfleet.sandbox.gpgkeys import (
    SigningKey,
    detach_sign,
    ensure_keys,
    export_key,
    sign_release,
    stop_gpg_agent,
)

RECIPE_VERSION = "1"
DEFAULT_BASE_URL = "http://192.168.250.1:8080"
# python3-apt and python3-requests: what the Ansible comparison's modules need on hosts (apt;
# community.docker talks to the Docker API through requests), bench/ansible/; haproxy and socat (its Runtime API's
# client): the lb role; python3-venv: an Auto Scaling group's user data installs it when the AMI's Python has no venv
# (a host booted from user data, tritonfleet/sandbox/cloudinit.py)
DEBIAN_PACKAGES: tuple[str, ...] = ("docker.io", "amazon-ecr-credential-helper", "python3-apt", "python3-requests",
                                   "prometheus-node-exporter", "haproxy", "socat", "python3-venv")
STAMP_NAME = ".tritonfleet-stamp"

KEY_UIDS = {
    "neuron": "Amazon AWS Neuron SANDBOX STAND-IN (tritonfleet throwaway key) <neuron@sandbox.tritonfleet.invalid>",
    "nvidia": "NVIDIA CORPORATION SANDBOX STAND-IN (tritonfleet throwaway key) <cudatools@sandbox.tritonfleet.invalid>",
    "debian": "tritonfleet sandbox Debian mirror (throwaway key) <debian@sandbox.tritonfleet.invalid>",
    "efa": "EFA installer SANDBOX STAND-IN (tritonfleet throwaway key) <efa@sandbox.tritonfleet.invalid>",
}


@dataclass(frozen=True)
class RepoInfo:
    """Where a built repository is and how hosts use it.

    ``path`` is the directory on the controller, ``url_path`` its path below the served root; ``suite`` is
    the dists suite (``"/"`` for a flat repository, ``""`` for the EFA download dir). ``keyring_path`` is the
    binary public key (for ``signed-by=``), ``armored_key_path`` the ASCII-armoured one under its real name.
    """

    name: str
    path: Path
    url_path: str
    suite: str
    component: str
    fingerprint: str
    keyring_path: Path
    armored_key_path: Path

    def url(self, base_url: str = DEFAULT_BASE_URL) -> str:
        return f"{base_url.rstrip('/')}/{self.url_path}"

    def source_line(self, base_url: str = DEFAULT_BASE_URL, signed_by: str | None = None) -> str:
        """The ``deb ...`` line for hosts, e.g. ``deb [signed-by=/etc/apt/keyrings/neuron.gpg] URL bookworm main``."""
        if not self.suite:
            raise ValueError(f"{self.name} is a download directory, not an apt repository")
        opts = f"[signed-by={signed_by}] " if signed_by else ""
        if self.suite == "/":
            return f"deb {opts}{self.url(base_url)} /"
        return f"deb {opts}{self.url(base_url)} {self.suite} {self.component}".rstrip()


# ------------------------------------------------------------------------------------------ helpers


def _inputs_hash(kind: str, debs: Iterable[Path], key: SigningKey, *extra: str) -> str:
    h = hashlib.sha256(f"{kind}\0{RECIPE_VERSION}\0{key.fingerprint}\0{chr(0).join(extra)}\0".encode())
    for deb in sorted(Path(d) for d in debs):
        h.update(f"{deb.name}\0{sha256_file(deb)}\0".encode())
    return h.hexdigest()


def _stamp_matches(path: Path, digest: str) -> bool:
    try:
        return (path / STAMP_NAME).read_text(encoding="ascii").strip() == digest
    except OSError:
        return False


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _swap_in(tmp: Path, final: Path) -> None:
    """Replace directory ``final`` by ``tmp`` (two renames; the old tree is deleted afterwards)."""
    old = final.with_name(f".{final.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)



@contextlib.contextmanager
def _staged(target: Path, digest: str) -> Iterator[Path]:
    """Build ``target`` in a temporary sibling; on success stamp it with ``digest`` and swap it in."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.build-", dir=target.parent))
    try:
        yield tmp
        (tmp / STAMP_NAME).write_text(digest + "\n", encoding="ascii")
        os.chmod(tmp, 0o755)
        _swap_in(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

def _gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def _ftparchive(cwd: Path, *args: str) -> bytes:
    proc = subprocess.run(["apt-ftparchive", *args], cwd=cwd, capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"apt-ftparchive {' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


def _release_opts(**fields: str) -> list[str]:
    opts: list[str] = []
    for key, value in fields.items():
        opts += ["-o", f"APT::FTPArchive::Release::{key}={value}"]
    return opts


def _pool_path(component: str, deb: Path) -> str:
    name = deb.name.split("_", 1)[0]
    prefix = name[:4] if name.startswith("lib") and len(name) > 3 else name[0]
    return f"pool/{component}/{prefix}/{name}/{deb.name}"


def _check_debs(debs: Sequence[Path]) -> list[Path]:
    paths = [Path(d) for d in debs]
    names = [p.name for p in paths]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate deb file names: {sorted(n for n in names if names.count(n) > 1)}")
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(p)
    return paths


# -------------------------------------------------------------------------------------- repo builds


def build_dist_repo(
    root: Path,
    suite: str,
    component: str,
    debs: Sequence[Path],
    key: SigningKey,
    *,
    name: str | None = None,
    url_path: str | None = None,
    armored_key_name: str = "archive-key.asc",
    keyring_path: Path | None = None,
    origin: str = "tritonfleet-sandbox",
    label: str = "tritonfleet-sandbox",
) -> RepoInfo:
    """Build a signed ``dists/<suite>/<component>`` repository in ``root`` (skipped if unchanged).

    Layout: ``pool/<component>/<x>/<pkg>/*.deb``, ``dists/<suite>/{Release,InRelease,Release.gpg}``,
    ``dists/<suite>/<component>/binary-amd64/Packages{,.gz}`` and the armoured public key as
    ``root/<armored_key_name>``. The binary key goes to ``keyring_path`` (default ``root/archive-keyring.gpg``).
    """
    root = Path(root)
    paths = _check_debs(debs)
    keyring_path = Path(keyring_path) if keyring_path else root / "archive-keyring.gpg"
    info = RepoInfo(
        name=name or root.name,
        path=root,
        url_path=url_path if url_path is not None else root.name,
        suite=suite,
        component=component,
        fingerprint=key.fingerprint,
        keyring_path=keyring_path,
        armored_key_path=root / armored_key_name,
    )
    digest = _inputs_hash("dist", paths, key, suite, component, armored_key_name, origin, label)
    if not (_stamp_matches(root, digest) and keyring_path.exists()):
        with _staged(root, digest) as tmp:
            for deb in paths:
                _link_or_copy(deb, tmp / _pool_path(component, deb))
            packages = _ftparchive(tmp, "packages", f"pool/{component}")
            bindir = tmp / "dists" / suite / component / f"binary-{ARCH}"
            bindir.mkdir(parents=True)
            (bindir / "Packages").write_bytes(packages)
            (bindir / "Packages.gz").write_bytes(_gzip_bytes(packages))
            release = _ftparchive(
                tmp,
                *_release_opts(
                    Origin=origin,
                    Label=label,
                    Suite=suite,
                    Codename=suite,
                    Architectures=ARCH,
                    Components=component,
                    Description=f"{label} (tritonfleet sandbox)",
                ),
                "release",
                f"dists/{suite}",
            )
            (tmp / "dists" / suite / "Release").write_bytes(release)  # written after hashing: no self-hash
            sign_release(key, tmp / "dists" / suite / "Release")
            (tmp / armored_key_name).write_bytes(export_key(key, armor=True))
        write_atomic(keyring_path, export_key(key, armor=False))
    return info


def build_flat_repo(
    directory: Path,
    debs: Sequence[Path],
    key: SigningKey,
    *,
    name: str | None = None,
    url_path: str | None = None,
    armored_key_path: Path | None = None,
    keyring_path: Path | None = None,
    origin: str = "tritonfleet-sandbox",
    label: str = "tritonfleet-sandbox",
) -> RepoInfo:
    """Build a signed flat repository (``deb URL /``) in ``directory`` (skipped if unchanged).

    The armoured key goes to ``armored_key_path`` (default ``directory/archive-key.asc``), the binary one to
    ``keyring_path`` (default ``directory/archive-keyring.gpg``).
    """
    directory = Path(directory)
    paths = _check_debs(debs)
    armored_key_path = Path(armored_key_path) if armored_key_path else directory / "archive-key.asc"
    keyring_path = Path(keyring_path) if keyring_path else directory / "archive-keyring.gpg"
    info = RepoInfo(
        name=name or directory.name,
        path=directory,
        url_path=url_path if url_path is not None else directory.name,
        suite="/",
        component="",
        fingerprint=key.fingerprint,
        keyring_path=keyring_path,
        armored_key_path=armored_key_path,
    )
    digest = _inputs_hash("flat", paths, key, origin, label)
    if not (_stamp_matches(directory, digest) and keyring_path.exists() and armored_key_path.exists()):
        with _staged(directory, digest) as tmp:
            for deb in paths:
                _link_or_copy(deb, tmp / deb.name)
            packages = _ftparchive(tmp, "packages", ".")
            (tmp / "Packages").write_bytes(packages)
            (tmp / "Packages.gz").write_bytes(_gzip_bytes(packages))
            release = _ftparchive(tmp, *_release_opts(Origin=origin, Label=label), "release", ".")
            (tmp / "Release").write_bytes(release)
            sign_release(key, tmp / "Release")
        write_atomic(armored_key_path, export_key(key, armor=True))
        write_atomic(keyring_path, export_key(key, armor=False))
    return info


def build_efa_download(directory: Path, key: SigningKey, *, keyring_path: Path | None = None) -> RepoInfo:
    """The EFA installer download dir: ``aws-efa-installer-latest.tar.gz``, ``.sig`` (detached, armoured)
    and ``aws-efa-installer.key``, like efa-installer.amazonaws.com (skipped if unchanged)."""
    directory = Path(directory)
    keyring_path = Path(keyring_path) if keyring_path else directory / "aws-efa-installer.gpg"
    files = standins.efa_installer_files()
    h = hashlib.sha256(f"efa\0{RECIPE_VERSION}\0{key.fingerprint}\0".encode())
    for rel in sorted(files):
        content, mode = files[rel]
        h.update(f"{rel}\0{mode:o}\0".encode() + hashlib.sha256(content).digest())
    digest = h.hexdigest()
    info = RepoInfo(
        name="efa",
        path=directory,
        url_path=directory.name,
        suite="",
        component="",
        fingerprint=key.fingerprint,
        keyring_path=keyring_path,
        armored_key_path=directory / "aws-efa-installer.key",
    )
    if _stamp_matches(directory, digest) and keyring_path.exists():
        return info
    with _staged(directory, digest) as tmp:
        tarball = tmp / "aws-efa-installer-latest.tar.gz"
        with open(tarball, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
                dirs = sorted({str(Path(rel).parent) for rel in files} | {"aws-efa-installer"})
                for d in dirs:
                    ti = tarfile.TarInfo(d)
                    ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, SOURCE_DATE_EPOCH
                    tar.addfile(ti)
                for rel in sorted(files):
                    content, mode = files[rel]
                    ti = tarfile.TarInfo(rel)
                    ti.size, ti.mode, ti.mtime = len(content), mode, SOURCE_DATE_EPOCH
                    tar.addfile(ti, io.BytesIO(content))
        detach_sign(key, tarball, tmp / "aws-efa-installer-latest.tar.gz.sig")
        (tmp / "aws-efa-installer.key").write_bytes(export_key(key, armor=True))
    write_atomic(keyring_path, export_key(key, armor=False))
    return info


# ----------------------------------------------------------------------------------------- build_all


def build_all(
    root: Path,
    cache_dir: Path,
    base_rootfs: Path,
    kernel_release: str,
    *,
    base_url: str = DEFAULT_BASE_URL,
    debian_packages: Sequence[str] = DEBIAN_PACKAGES,
) -> dict[str, RepoInfo]:
    """Build (or confirm) every repository under ``root``; returns ``{"neuron"|"nvidia"|"debian"|"efa": info}``.

    ``cache_dir`` keeps the GNUPGHOME (``gnupg/``), the stand-in debs (``standin-debs/``) and the fetched
    Debian debs (``debian-debs/``). Idempotent; on a warm cache it only hashes its inputs.
    """
    root, cache_dir = Path(root), Path(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    gnupghome = cache_dir / "gnupg"
    stand = standins.build_standin_debs(cache_dir / "standin-debs", kernel_release)
    repo_of = standins.standin_repo_map(kernel_release)
    debian_debs = fetch_debian_debs(base_rootfs, list(debian_packages), cache_dir)
    fprs = ensure_keys(gnupghome, KEY_UIDS.values())
    keys = {name: SigningKey(gnupghome, fprs[uid]) for name, uid in KEY_UIDS.items()}
    keyrings = root / "keyrings"
    try:
        headers = [d for d in stand if d.name.startswith("linux-headers-")]
        neuron = build_dist_repo(
            root / "neuron",
            "bookworm",
            "main",
            [d for d in stand if repo_of[d.name] == "neuron"],
            keys["neuron"],
            name="neuron",
            url_path="neuron",
            armored_key_name="GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB",
            keyring_path=keyrings / "neuron.gpg",
            origin="Neuron",
            label="Neuron",
        )
        nvidia = build_flat_repo(
            root / "nvidia/stable/deb" / ARCH,
            [d for d in stand if repo_of[d.name] == "nvidia"],
            keys["nvidia"],
            name="nvidia",
            url_path=f"nvidia/stable/deb/{ARCH}",
            armored_key_path=root / "nvidia/gpgkey",
            keyring_path=keyrings / "nvidia.gpg",
            origin="https://nvidia.github.io/libnvidia-container/stable/deb",
            label="libnvidia-container",
        )
        write_atomic(
            root / "nvidia/stable/deb/nvidia-container-toolkit.list",
            f"deb {base_url.rstrip('/')}/nvidia/stable/deb/$(ARCH) /\n".encode(),
        )
        debian = build_dist_repo(
            root / "debian",
            "bookworm",
            "main",
            [*debian_debs, *headers, *(d for d in stand if repo_of[d.name] == "debian")],
            keys["debian"],
            name="debian",
            url_path="debian",
            armored_key_name="archive-key.asc",
            keyring_path=keyrings / "debian.gpg",
            origin="Debian",
            label="Debian",
        )
        efa = build_efa_download(root / "efa", keys["efa"], keyring_path=keyrings / "efa.gpg")
    finally:
        stop_gpg_agent(gnupghome)
    return {"neuron": neuron, "nvidia": nvidia, "debian": debian, "efa": efa}
