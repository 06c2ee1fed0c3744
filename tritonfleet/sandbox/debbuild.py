"""Stand-in package definitions made into .deb files: the package and file records, staging with fixed
timestamps, ``dpkg-deb`` (reproducible) and a cache that rebuilds a package only when it changed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tritonfleet.sandbox.fsutil import SOURCE_DATE_EPOCH, write_atomic

RECIPE_VERSION = "1"
MAINTAINER = "tritonfleet sandbox <sandbox@tritonfleet.invalid>"
MANIFEST_NAME = ".standins-manifest.json"


@dataclass(frozen=True)
class StandinFile:
    """One file in a stand-in package: ``path`` is absolute inside the package; ``link`` makes a symlink."""

    path: str
    content: bytes = b""
    mode: int = 0o644
    link: str | None = None


@dataclass(frozen=True)
class StandinPackage:
    """A stand-in package definition. ``repo`` names the apt repository that carries it."""

    name: str
    version: str
    summary: str
    repo: str
    architecture: str = "amd64"
    section: str = "misc"
    depends: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    replaces: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    files: tuple[StandinFile, ...] = ()
    scripts: dict[str, str] = field(default_factory=dict)

    @property
    def deb_filename(self) -> str:
        version = self.version.split(":", 1)[-1]
        return f"{self.name}_{version}_{self.architecture}.deb"

    def control(self) -> str:
        fields = [
            ("Package", self.name),
            ("Version", self.version),
            ("Architecture", self.architecture),
            ("Maintainer", MAINTAINER),
            ("Section", self.section),
            ("Priority", "optional"),
            ("Depends", ", ".join(self.depends)),
            ("Conflicts", ", ".join(self.conflicts)),
            ("Replaces", ", ".join(self.replaces)),
            ("Provides", ", ".join(self.provides)),
        ]
        text = "".join(f"{key}: {value}\n" for key, value in fields if value)
        return (
            text + f"Description: SANDBOX STAND-IN {self.summary}\n"
            " Stand-in built by the tritonfleet sandbox: it carries the real package name and version\n"
            " but only simulates the accelerator (see docs/sandbox-hardware.md). Never install it on a\n"
            " real host.\n"
        )

    def input_hash(self) -> str:
        h = hashlib.sha256()
        h.update(f"recipe={RECIPE_VERSION}\n{self.control()}".encode())
        for f in sorted(self.files, key=lambda f: f.path):
            h.update(f"{f.path}\0{f.mode:o}\0{f.link}\0".encode())
            h.update(hashlib.sha256(f.content).digest())
        for name in sorted(self.scripts):
            h.update(f"{name}\0{self.scripts[name]}\0".encode())
        return h.hexdigest()


def _stage(pkg: StandinPackage, staging: Path) -> None:
    debian = staging / "DEBIAN"
    debian.mkdir(parents=True)
    (debian / "control").write_text(pkg.control(), encoding="utf-8")
    for name, text in pkg.scripts.items():
        (debian / name).write_text(text, encoding="utf-8")
        (debian / name).chmod(0o755)
    for f in pkg.files:
        dest = staging / f.path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if f.link is not None:
            dest.symlink_to(f.link)
        else:
            dest.write_bytes(f.content)
            dest.chmod(f.mode)
    for path in sorted(staging.rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
        os.utime(path, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH), follow_symlinks=False)
    staging.chmod(0o755)


def build_deb(pkg: StandinPackage, outdir: Path) -> Path:
    """Build one package into ``outdir`` with ``dpkg-deb --root-owner-group --build`` (always rebuilds)."""
    outdir.mkdir(parents=True, exist_ok=True)
    out = outdir / pkg.deb_filename
    with tempfile.TemporaryDirectory(prefix="standin-", dir=outdir) as tmp:
        staging = Path(tmp) / "root"
        _stage(pkg, staging)
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
        tmp_deb = Path(tmp) / pkg.deb_filename
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(staging), str(tmp_deb)],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.replace(tmp_deb, out)
    return out


def build_debs(pkgs: list[StandinPackage], outdir: Path) -> list[Path]:
    """Build (or reuse) ``pkgs`` into ``outdir``; returns the .deb paths.

    A package is rebuilt only when its definition changed (a manifest in ``outdir`` records the input
    hash per file); debs this function built earlier that are no longer wanted are deleted.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    manifest_path = outdir / MANIFEST_NAME
    try:
        manifest: dict[str, str] = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = {}
    names = [p.deb_filename for p in pkgs]
    if len(set(names)) != len(names):
        raise ValueError("duplicate stand-in package file names")
    todo = [
        p
        for p in pkgs
        if manifest.get(p.deb_filename) != p.input_hash() or not (outdir / p.deb_filename).exists()
    ]
    if todo:
        with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
            list(pool.map(lambda p: build_deb(p, outdir), todo))
    wanted = {p.deb_filename: p.input_hash() for p in pkgs}
    for stale in set(manifest) - set(wanted):
        (outdir / stale).unlink(missing_ok=True)
    if wanted != manifest:
        write_atomic(manifest_path, json.dumps(wanted, indent=1, sort_keys=True).encode())
    return [outdir / n for n in names]
