"""The fleet's SSH key pair: a given public key imported, or a new key whose private half is written
once to a 0600 file and never printed.

Local files (``--key-dir``, ``TRITONFLEET_KEY_DIR``, default ``~/.ssh``): ``tritonfleet-<fleet>.pem``
(a created key's private key) and ``tritonfleet-<fleet>.known_hosts`` (host keys pyinfra learns on first
contact; per fleet, so addresses EC2 reuses in other fleets never clash). ``down`` removes both only
when the key pair was created here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from botocore.exceptions import ClientError

from tritonfleet.fleet.aws import Clients, error_code, one_line
from tritonfleet.fleet.tags import (
    ROLE_KEY,
    TAG_KEY_ORIGIN,
    FleetError,
    as_dict,
    belongs,
    fleet_filters,
    resource_name,
    tag_specs,
)


def key_dir(explicit: str | os.PathLike | None = None) -> Path:
    return Path(explicit or os.environ.get("TRITONFLEET_KEY_DIR") or Path.home() / ".ssh").expanduser()


def private_key_path(fleet: str, directory: str | os.PathLike | None = None) -> Path:
    return key_dir(directory) / f"{resource_name(fleet)}.pem"


def known_hosts_path(fleet: str, directory: str | os.PathLike | None = None) -> Path:
    return key_dir(directory) / f"{resource_name(fleet)}.known_hosts"


@dataclass(frozen=True)
class KeyPair:
    name: str
    origin: str  # "created" or "imported"
    private_key: Path | None


def _write_private(path: Path, material: str) -> None:
    """Write a private key to a new file created with mode 0600 (never over an existing file)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(material if material.endswith("\n") else material + "\n")
    os.chmod(path, 0o600)


def ensure_key_pair(clients: Clients, fleet: str, public_key: str | os.PathLike | None = None,
                    directory: str | os.PathLike | None = None) -> KeyPair:
    """Reuse the fleet's key pair, or import ``public_key`` (a file), or create one (ed25519)."""
    ec2, name = clients.ec2, resource_name(fleet)
    existing = ec2.describe_key_pairs(Filters=fleet_filters(fleet, ROLE_KEY))["KeyPairs"]
    pem = private_key_path(fleet, directory)
    if existing:
        origin = as_dict(existing[0].get("Tags")).get(TAG_KEY_ORIGIN, "imported")
        return KeyPair(existing[0]["KeyName"], origin, pem if origin == "created" and pem.exists() else None)
    if public_key:
        try:
            material = Path(public_key).expanduser().read_bytes()
        except OSError as exc:
            raise FleetError(f"--public-key {public_key}: {exc.strerror}") from None
        if b"PRIVATE KEY" in material:
            raise FleetError(f"--public-key {public_key} holds a private key; give the .pub file")
        try:
            ec2.import_key_pair(KeyName=name, PublicKeyMaterial=material,
                                TagSpecifications=tag_specs(fleet, ROLE_KEY, ["key-pair"],
                                                            **{TAG_KEY_ORIGIN: "imported"}))
        except ClientError as exc:
            raise FleetError(_duplicate(exc, name, fleet) or f"cannot import key pair {name}: {one_line(exc)}") from None
        return KeyPair(name, "imported", None)
    if pem.exists():
        raise FleetError(f"{pem} exists but fleet {fleet} has no key pair: move the file away or pass --public-key")
    try:
        created = ec2.create_key_pair(KeyName=name, KeyType="ed25519", KeyFormat="pem",
                                      TagSpecifications=tag_specs(fleet, ROLE_KEY, ["key-pair"],
                                                                  **{TAG_KEY_ORIGIN: "created"}))
    except ClientError as exc:
        raise FleetError(_duplicate(exc, name, fleet) or f"cannot create key pair {name}: {one_line(exc)}") from None
    try:
        _write_private(pem, created["KeyMaterial"])
    except OSError as exc:
        ec2.delete_key_pair(KeyName=name)  # a key nobody holds is useless
        raise FleetError(f"cannot write the private key to {pem}: {exc.strerror}; key pair deleted") from None
    return KeyPair(name, "created", pem)


def _duplicate(exc: ClientError, name: str, fleet: str) -> str | None:
    if error_code(exc) == "InvalidKeyPair.Duplicate":
        return f"key pair {name} exists but is not tagged for fleet {fleet}; delete or rename it"
    return None


def delete_key_pairs(clients: Clients, fleet: str, directory: str | os.PathLike | None = None) -> list[str]:
    """Delete the fleet's key pairs; a created key's local private key and known_hosts go with it."""
    deleted = []
    for pair in clients.ec2.describe_key_pairs(Filters=fleet_filters(fleet, ROLE_KEY))["KeyPairs"]:
        if not belongs(pair.get("Tags"), fleet, ROLE_KEY):
            continue
        clients.ec2.delete_key_pair(KeyName=pair["KeyName"])
        deleted.append(pair["KeyName"])
        if as_dict(pair.get("Tags")).get(TAG_KEY_ORIGIN) == "created":
            for path in (private_key_path(fleet, directory), known_hosts_path(fleet, directory)):
                path.unlink(missing_ok=True)
    if deleted:
        known_hosts_path(fleet, directory).unlink(missing_ok=True)
    return deleted
