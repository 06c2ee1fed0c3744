"""Throwaway signing keys for the sandbox's repositories: one ed25519 key per uid in a GNUPGHOME,
generated once and reused; signing of apt ``Release`` files and detached signatures."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SigningKey:
    """A secret key in ``gnupghome`` identified by ``fingerprint``."""

    gnupghome: Path
    fingerprint: str


def gpg(gnupghome: Path, *args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(
        ["gpg", "--homedir", str(gnupghome), "--batch", "--no-tty", "--quiet", *args],
        input=stdin,
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"gpg {' '.join(args)} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def _list_secret_keys(gnupghome: Path) -> dict[str, str]:
    """``{uid: fingerprint}`` of the secret keys in ``gnupghome``."""
    out = gpg(gnupghome, "--with-colons", "--list-secret-keys").decode()
    keys: dict[str, str] = {}
    fpr = None
    in_primary = False
    for line in out.splitlines():
        fields = line.split(":")
        if fields[0] == "sec":
            in_primary, fpr = True, None
        elif fields[0] == "ssb":
            in_primary = False
        elif fields[0] == "fpr" and in_primary and fpr is None:
            fpr = fields[9]
        elif fields[0] == "uid" and fpr:
            keys.setdefault(fields[9], fpr)
    return keys


def ensure_keys(gnupghome: Path, uids: Iterable[str]) -> dict[str, str]:
    """``{uid: fingerprint}``: one ed25519 signing key per uid in ``gnupghome``, generated on first use."""
    gnupghome = Path(gnupghome)
    gnupghome.mkdir(parents=True, exist_ok=True)
    gnupghome.chmod(0o700)
    uids = list(uids)
    keys = _list_secret_keys(gnupghome)
    missing = [uid for uid in uids if uid not in keys]
    for uid in missing:
        gpg(gnupghome, "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never")
    if missing:
        keys = _list_secret_keys(gnupghome)
    return {uid: keys[uid] for uid in uids}


def ensure_key(gnupghome: Path, uid: str) -> str:
    """Fingerprint of the ed25519 signing key with ``uid`` in ``gnupghome``; generated on first use."""
    return ensure_keys(gnupghome, [uid])[uid]


def stop_gpg_agent(gnupghome: Path) -> None:
    """Stop the gpg-agent that signing started for ``gnupghome`` (leave no daemon behind)."""
    subprocess.run(
        ["gpgconf", "--homedir", str(gnupghome), "--kill", "gpg-agent"],
        capture_output=True,
        check=False,
    )


def export_key(key: SigningKey, *, armor: bool) -> bytes:
    args = ["--armor"] if armor else []
    return gpg(key.gnupghome, "--export-options", "export-minimal", *args, "--export", key.fingerprint)


def detach_sign(key: SigningKey, src: Path, sig: Path) -> None:
    """``sig``: an ASCII-armoured detached signature of ``src``."""
    gpg(key.gnupghome, "--yes", "--local-user", key.fingerprint, "--digest-algo", "SHA512", "--armor",
        "--detach-sign", "-o", str(sig), str(src))


def sign_release(key: SigningKey, release: Path) -> None:
    """``InRelease`` (clearsigned) and ``Release.gpg`` (detached) next to ``release``."""
    gpg(key.gnupghome, "--yes", "--local-user", key.fingerprint, "--digest-algo", "SHA512", "--clearsign",
        "-o", str(release.with_name("InRelease")), str(release))
    detach_sign(key, release, release.with_name("Release.gpg"))
