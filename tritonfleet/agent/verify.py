"""Checking a downloaded file against what S3 says about the object: its ETag (the md5 of a single-part
upload, the md5 of the parts' md5s for a multipart one) or, where the ETag is no md5, an S3 checksum."""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import zlib
from collections.abc import Callable
from typing import Any

CHUNK = 1 << 20
EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"
_SINGLE = re.compile(r"^[0-9a-f]{32}$")
_MULTI = re.compile(r"^[0-9a-f]{32}-([1-9][0-9]{0,4})$")


def _md5():
    # usedforsecurity=False: md5 here is an integrity check, and FIPS-mode hosts refuse it otherwise
    return hashlib.md5(usedforsecurity=False)


def etag_parts(etag: str) -> int | None:
    """0 for a single-part ETag (an md5), N for a multipart one ("<md5 of md5s>-N"), None for neither."""
    if _SINGLE.match(etag):
        return 0
    m = _MULTI.match(etag)
    return int(m.group(1)) if m else None


def uniform_parts(size: int, first: int, count: int) -> list[int] | None:
    """Part sizes of an upload of ``size`` bytes in ``count`` parts of ``first`` bytes but the last (how
    every SDK and the CLI upload); None when the numbers cannot describe such an upload."""
    if first <= 0 or count < 1:
        return None
    last = size - first * (count - 1)
    if not 0 < last <= first:
        return None
    return [first] * (count - 1) + [last]


def guess_parts(size: int, count: int) -> list[int] | None:
    """The part sizes of ``size`` bytes uploaded in ``count`` parts of a whole number of MiB, the smallest
    such size (what SDKs do: boto3 8 MiB, the CLI's default chunk size): a guess a check can confirm
    without asking S3 (a wrong guess simply does not match)."""
    mib = 1 << 20
    if count < 2 or size <= 0:
        return None
    first = -(-size // count)  # the smallest part size giving at most count parts
    first = -(-first // mib) * mib
    return uniform_parts(size, first, count)


def _whole_md5(path: str) -> str:
    h = _md5()
    with open(path, "rb") as f:
        for buf in iter(lambda: f.read(CHUNK), b""):
            h.update(buf)
    return h.hexdigest()


def hash_file(path: str, part_sizes: list[int] | None = None) -> tuple[str, str]:
    """The hex md5 of the whole file, and the ETag S3 gives the same bytes uploaded in parts of
    ``part_sizes`` (without parts: the md5 again). With parts, the whole-file md5 is computed by a second
    thread reading the file alongside (hashlib releases the GIL: two cores, half the time)."""
    if not part_sizes:
        md5 = _whole_md5(path)
        return md5, md5
    whole: list[str] = []
    worker = threading.Thread(target=lambda: whole.append(_whole_md5(path)), daemon=True)
    worker.start()
    digests = []
    with open(path, "rb") as f:
        for n in part_sizes:
            h = _md5()
            while n > 0:
                buf = f.read(min(CHUNK, n))
                if not buf:
                    break
                h.update(buf)
                n -= len(buf)
            digests.append(h.digest())
        extra = bool(f.read(1))
    etag = _md5()
    for d in digests:
        etag.update(d)
    worker.join()
    if not whole:
        raise OSError(f"{path}: could not be read to the end")
    # bytes past the parts: the file is not what those parts make up
    return whole[0], f"{etag.hexdigest()}-{len(digests)}" + ("+" if extra else "")


class _Crc32:
    def __init__(self) -> None:
        self.value = 0

    def update(self, buf: bytes) -> None:
        self.value = zlib.crc32(buf, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(4, "big")


# The S3 checksums the standard library can compute: name -> (HeadObject field, hash constructor)
_CHECKSUMS: dict[str, tuple[str, Callable[[], Any]]] = {"sha256": ("ChecksumSHA256", hashlib.sha256), "sha1": ("ChecksumSHA1", hashlib.sha1),
              "crc32": ("ChecksumCRC32", _Crc32)}


def full_object_checksum(head: dict) -> tuple[str, str] | None:
    """The (algorithm, base64 value) of a full-object checksum in a HeadObject response (ChecksumMode
    ENABLED) that this module can check; None when there is none (or only a composite, per-part one)."""
    if head.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT":
        return None
    for name, (field_name, _) in _CHECKSUMS.items():
        value = head.get(field_name)
        if value and "-" not in value:
            return name, value
    return None


def checksum_matches(path: str, algorithm: str, value: str) -> bool:
    """Whether the file's ``algorithm`` checksum (a name in ``_CHECKSUMS``) is the base64 ``value``."""
    h = _CHECKSUMS[algorithm][1]()
    with open(path, "rb") as f:
        for buf in iter(lambda: f.read(CHUNK), b""):
            h.update(buf)
    return base64.b64encode(h.digest()).decode() == value
