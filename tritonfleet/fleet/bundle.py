"""The fleet bundle an Auto Scaling group's instances deploy themselves from.

A reproducible ``tar.gz`` of the project (``tritonfleet/``, ``roles/``, ``deploys/``, ``templates/``,
``inventories/group_data/``, ``pyproject.toml``, ``README.md``) plus two generated files:
``fleet-data.json`` (the hosts' data) and ``inventories/fleet_local.py`` (host ``@local`` with that data).
Entries are sorted, with fixed times and owners, so the same tree and data give the same sha256, and an
unchanged bundle never triggers a new launch template version.

Secrets never go into the bundle: data keys that look secret are refused, and ``secret_parameters``
maps such keys to SSM parameters the user data reads at boot (into environment variables the generated
inventory reads).

QA suites (``qa_suites``, the launch's QA gate) travel too: a directory of the project that the bundle holds
anyway stays as it is named; any other directory on the controller is packed as :data:`QA_DIR` and the bundle's
data names that. A ``qa_suites`` that is not a directory here is refused before anything is built.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from tritonfleet.config import looks_secret
from tritonfleet.fleet.aws import one_line
from tritonfleet.fleet.iam import split_s3
from tritonfleet.fleet.tags import FleetError
from tritonfleet.templating import render

CONTENTS = ("tritonfleet", "roles", "deploys", "templates", "inventories/group_data", "pyproject.toml", "README.md")
SKIP = re.compile(r"(^|/)(__pycache__|\.pytest_cache|\.ruff_cache|[^/]*\.egg-info)(/|$)|\.py[co]$")
INVENTORY = "inventories/fleet_local.py"
DATA_FILE = "fleet-data.json"
DEPLOY = "deploys/serve.py"
QA_DIR = "qa-suites"  # where a controller's QA suites go in the bundle (its data's qa_suites then)


@dataclass(frozen=True)
class Bundle:
    path: Path
    sha256: str
    secret_env: Mapping[str, str]

    @property
    def key_name(self) -> str:
        return f"tritonfleet-bundle-{self.sha256[:16]}.tar.gz"


def secret_env_name(key: str) -> str:
    """The environment variable a secret data key travels in: ``TRITONFLEET_SECRET_<KEY>``."""
    return "TRITONFLEET_SECRET_" + re.sub(r"[^A-Z0-9]", "_", key.upper())


#: Last words of data keys whose values are public by nature, though a word before looks secret: a key's
#: fingerprint or the URL it is fetched from (``neuron_key_fingerprint``, ``nvidia_key_url``) travel in the bundle.
PUBLIC_LAST_WORDS = ("fingerprint", "url")


def is_bundle_secret(key: str) -> bool:
    """``key``'s value must not go into the bundle (:func:`looks_secret`, but a fingerprint or URL of a key)."""
    return looks_secret(key) and key.lower().rsplit("_", 1)[-1] not in PUBLIC_LAST_WORDS


def _check_data(data: Mapping[str, Any], secret_parameters: Mapping[str, str]) -> None:
    for key, value in data.items():
        if is_bundle_secret(key) and value is not None:
            raise FleetError(f"bundle data {key}: secrets do not go into the bundle; store it in SSM Parameter "
                             f"Store and pass --secret {key}=/parameter/name")
    for key, parameter in secret_parameters.items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key) or not str(parameter).startswith("/"):
            raise FleetError(f"--secret {key}={parameter}: expected data_key=/ssm/parameter/name")
    try:
        json.dumps(dict(data))
    except (TypeError, ValueError) as exc:
        raise FleetError(f"bundle data is not JSON: {exc}") from None


def _add_bytes(tar: tarfile.TarFile, name: str, payload: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(payload), mode, 0
    tar.addfile(info, io.BytesIO(payload))


def _members(root: Path) -> list[Path]:
    out: list[Path] = []
    for entry in CONTENTS:
        path = root / entry
        if not path.exists() and not path.is_symlink():
            raise FleetError(f"cannot build the bundle: {path} is missing (run from the project checkout)")
        candidates = [path]
        if path.is_dir() and not path.is_symlink():
            for top, dirs, files in os.walk(path):  # symlinks (tritonfleet/templates) stay links
                candidates += [Path(top) / name for name in dirs + files]
        out += [p for p in candidates if not SKIP.search(p.relative_to(root).as_posix())]
    return sorted(set(out), key=lambda p: p.relative_to(root).as_posix())


def _suites(root: Path, data: Mapping[str, Any]) -> tuple[Path | None, dict[str, Any]]:
    """(the QA suites directory to pack as :data:`QA_DIR`, None when there is none to pack; the data the bundle
    carries, ``qa_suites`` renamed when they are packed). Relative names are the project's, as for a deploy."""
    suites = data.get("qa_suites")
    if suites in (None, ""):
        return None, dict(data)
    if not isinstance(suites, str):
        raise FleetError(f"bundle data qa_suites {suites!r}: expected the path of a directory of QA suites")
    path = (root / suites).resolve()
    if not path.is_dir():
        raise FleetError(f"bundle data qa_suites {suites!r}: no such directory on the controller ({path}); the "
                         "bundle carries the suites its instances' QA gate runs")
    inside = path.relative_to(root).as_posix() if path.is_relative_to(root) else None
    if inside is not None and any(inside == c or inside.startswith(c + "/") for c in CONTENTS):
        return None, {**data, "qa_suites": inside}  # packed with the project already
    return path, {**data, "qa_suites": QA_DIR}


def _suite_members(path: Path) -> list[tuple[Path, str]]:
    """(file or directory, its name in the bundle) for the suites directory, sorted; symlinks are refused (a
    bundle holds what it names, not what a link points to on the controller)."""
    out = [(path, QA_DIR)]
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(top) / name
            rel = p.relative_to(path).as_posix()
            if SKIP.search(rel):
                continue
            if p.is_symlink():
                raise FleetError(f"bundle data qa_suites: {p} is a symbolic link: the bundle holds regular files "
                                 "and directories only")
            out.append((p, f"{QA_DIR}/{rel}"))
    return sorted(out, key=lambda m: m[1])


def build_bundle(root: str | Path, data: Mapping[str, Any], out_dir: str | Path,
                 secret_parameters: Mapping[str, str] | None = None) -> Bundle:
    """Write the bundle into ``out_dir``; returns its path and sha256."""
    root, secret_parameters = Path(root).resolve(), dict(secret_parameters or {})
    _check_data(data, secret_parameters)
    suites, data = _suites(root, data)
    secret_env = {key: secret_env_name(key) for key in sorted(secret_parameters)}
    members = [(path, path.relative_to(root).as_posix()) for path in _members(root)]
    if suites is not None:
        members += _suite_members(suites)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, arcname in members:
            info = tar.gettarinfo(str(path), arcname=arcname)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = (0o755 if info.isdir() or info.mode & 0o111 else 0o644) if not info.issym() else info.mode
            if info.isfile():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
        _add_bytes(tar, DATA_FILE, (json.dumps(dict(data), indent=2, sort_keys=True) + "\n").encode())
        inventory = render("fleet/local-inventory.py.j2", secret_env=secret_env, inventory=INVENTORY, deploy=DEPLOY)
        _add_bytes(tar, INVENTORY, inventory.encode())
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    payload = packed.getvalue()
    sha = hashlib.sha256(payload).hexdigest()
    bundle = Bundle(Path(out_dir) / f"tritonfleet-bundle-{sha[:16]}.tar.gz", sha, secret_env)
    bundle.path.parent.mkdir(parents=True, exist_ok=True)
    bundle.path.write_bytes(payload)
    return bundle


def publish_bundle(s3: Any, bundle: Bundle, s3_prefix: str) -> str:
    """Upload the bundle under ``s3_prefix`` (S3 checks the sha256 on upload); returns its s3:// URL."""
    bucket, prefix = split_s3(s3_prefix, "--bundle-s3")
    key = f"{prefix}/{bundle.key_name}" if prefix else bundle.key_name
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=bundle.path.read_bytes(), ChecksumAlgorithm="SHA256",
                      Metadata={"sha256": bundle.sha256})
    except ClientError as exc:
        raise FleetError(f"cannot upload the bundle to s3://{bucket}/{key}: {one_line(exc)}") from None
    return f"s3://{bucket}/{key}"
