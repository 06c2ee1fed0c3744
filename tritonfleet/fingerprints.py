"""OpenPGP fingerprints as host data gives them (spaces allowed, any case), normalised and validated."""

from __future__ import annotations

import re

_FPR = re.compile(r"^[0-9A-F]{40}$")


def fingerprint(value: str | None) -> str | None:
    if value is None:
        return None
    norm = str(value).replace(" ", "").upper()
    if not _FPR.match(norm):
        raise ValueError("expected a 40-hex-digit OpenPGP fingerprint (gpg --show-keys --with-colons KEYFILE)")
    return norm
