"""Real Debian packages for the sandbox mirror: what the hosts' base image lacks, downloaded once."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tritonfleet.sandbox.debsources import bookworm_lines
from tritonfleet.sandbox.fsutil import sha256_file

RECIPE_VERSION = "1"
ARCH = "amd64"


def fetch_debian_debs(base_rootfs: Path, packages: list[str], cache_dir: Path) -> list[Path]:
    """Download ``packages`` plus exactly the dependencies ``base_rootfs`` lacks; cached per package list.

    Runs the controller's ``apt-get`` against the base rootfs's dpkg status (``Dir::State::status``), with
    private lists/archives under ``cache_dir`` and the controller's Debian sources; nothing in the base
    rootfs or the controller's apt state is modified. The result is cached in
    ``cache_dir/debian-debs/<hash of package list + base status>/`` and not fetched again.
    """
    base_rootfs, cache_dir = Path(base_rootfs), Path(cache_dir)
    status = base_rootfs / "var/lib/dpkg/status"
    if not status.is_file():
        raise FileNotFoundError(f"{status}: base rootfs has no dpkg status")
    wanted = sorted(set(packages))
    key = hashlib.sha256(
        json.dumps({"packages": wanted, "status": sha256_file(status), "recipe": RECIPE_VERSION}).encode()
    ).hexdigest()[:20]
    out = cache_dir / "debian-debs" / key
    if (out / ".complete").exists():
        return sorted(out.glob("*.deb"))
    work = cache_dir / "apt-work"
    for sub in (
        "state/lists/partial",
        "cache",
        "archives/partial",
        "etc/sources.list.d",
        "etc/preferences.d",
    ):
        (work / sub).mkdir(parents=True, exist_ok=True)
    for deb in (work / "archives").glob("*.deb"):
        deb.unlink()
    (work / "etc/preferences").write_text("", encoding="ascii")
    (work / "state/extended_states").touch()
    # the controller's mirrors, as the base image was built from them
    (work / "etc/sources.list").write_text("".join(f"{line}\n" for line in bookworm_lines()), encoding="ascii")
    (work / "etc/sources.list.d/debian.sources").unlink(missing_ok=True)
    opts = [
        "-o",
        f"Dir::State={work / 'state'}",
        "-o",
        f"Dir::State::status={status}",
        "-o",
        f"Dir::State::extended_states={work / 'state/extended_states'}",
        "-o",
        f"Dir::Cache={work / 'cache'}",
        "-o",
        f"Dir::Cache::archives={work / 'archives'}",
        "-o",
        "Dir::Cache::pkgcache=",
        "-o",
        "Dir::Cache::srcpkgcache=",
        "-o",
        f"Dir::Etc::SourceList={work / 'etc/sources.list'}",
        "-o",
        f"Dir::Etc::SourceParts={work / 'etc/sources.list.d'}",
        "-o",
        f"Dir::Etc::Preferences={work / 'etc/preferences'}",
        "-o",
        f"Dir::Etc::PreferencesParts={work / 'etc/preferences.d'}",
        "-o",
        "APT::Install-Recommends=false",
        "-o",
        "APT::Install-Suggests=false",
        "-o",
        "APT::Sandbox::User=root",
        "-o",
        "Debug::NoLocking=true",
        "-o",
        "Acquire::Languages=none",
        "-o",
        f"APT::Architecture={ARCH}",
    ]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C.UTF-8"}
    for args in (["update"], ["install", "--download-only", "-y", "--no-install-recommends", *wanted]):
        proc = subprocess.run(["apt-get", "-q", *opts, *args], capture_output=True, env=env, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"apt-get {args[0]} failed:\n{proc.stdout.decode()}\n{proc.stderr.decode()}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".debs-", dir=out.parent))
    try:
        for deb in (work / "archives").glob("*.deb"):
            shutil.move(str(deb), tmp / deb.name)
        (tmp / "packages.json").write_text(json.dumps(wanted) + "\n", encoding="ascii")
        (tmp / ".complete").touch()
        os.chmod(tmp, 0o755)
        shutil.rmtree(out, ignore_errors=True)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return sorted(out.glob("*.deb"))
