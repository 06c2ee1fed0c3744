"""Checking downloads against S3 in detail (from the mutation survivors of tritonfleet/agent/verify.py): the
ETag forms, the part sizes SDKs upload in and the guess made from a part count, hashing in parts (short
files, bytes past the parts), and the S3 checksums a HeadObject can carry."""

from __future__ import annotations

import base64
import hashlib
import os
import zlib

import pytest

from tritonfleet.agent.verify import (
    EMPTY_MD5,
    checksum_matches,
    etag_parts,
    full_object_checksum,
    guess_parts,
    hash_file,
    uniform_parts,
)

MiB = 1024 * 1024


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def etag_of(data: bytes, sizes: list[int]) -> str:
    """The ETag S3 gives ``data`` uploaded in parts of ``sizes`` (the md5 of the parts' md5s, "-N")."""
    digests, at = [], 0
    for n in sizes:
        digests.append(hashlib.md5(data[at:at + n]).digest())
        at += n
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(sizes)}"


def test_the_empty_md5_is_the_md5_of_no_bytes():
    assert EMPTY_MD5 == hashlib.md5(b"").hexdigest()
    assert etag_parts(EMPTY_MD5) == 0


@pytest.mark.parametrize("etag, parts", [
    ("0123456789abcdef0123456789abcdef-1", 1),
    ("0123456789abcdef0123456789abcdef-99999", 99999),
    ("0123456789abcdef0123456789abcdef-100000", None),  # more parts than S3 allows
    ("0123456789abcdef0123456789abcdef-01", None),
    ("x0123456789abcdef0123456789abcdef", None),
    ("0123456789abcdef0123456789abcdef0", None),
    ("0123456789abcdef0123456789abcdef-2x", None),
    ("0123456789ABCDEF0123456789abcdef-2", None),
])
def test_etag_forms(etag, parts):
    assert etag_parts(etag) == parts


@pytest.mark.parametrize("size, first, count, parts", [
    (3, 1, 3, [1, 1, 1]),  # parts of one byte
    (2, 1, 3, None),
    (0, 4, 0, None),  # no parts at all
    (0, 4, 1, None),  # an empty last part
    (4, 4, 1, [4]),
    (9, 4, 3, [4, 4, 1]),
    (-1, 4, 1, None),
    (5, -2, 1, None),
])
def test_uniform_parts_edges(size, first, count, parts):
    assert uniform_parts(size, first, count) == parts


@pytest.mark.parametrize("size, count, parts", [
    (9 * MiB + 7, 2, [5 * MiB, 4 * MiB + 7]),  # boto3 at 5 MiB parts
    (16 * MiB, 2, [8 * MiB, 8 * MiB]),
    (16 * MiB + 1, 2, [9 * MiB, 7 * MiB + 1]),
    (20 * MiB, 3, [7 * MiB, 7 * MiB, 6 * MiB]),
    (2 * MiB + 1, 3, [MiB, MiB, 1]),
    (10, 2, None),  # two whole MiB parts cannot make 10 bytes
    (MiB, 2, None),
    (5, 1, None),  # one part: nothing to guess
    (5 * MiB, 1, None),
    (0, 2, None),
    (-5, 2, None),
])
def test_guess_parts_is_the_smallest_whole_mib_size(size, count, parts):
    assert guess_parts(size, count) == parts


def test_guess_parts_matches_a_boto3_etag(tmp_path):
    data = os.urandom(9 * MiB + 7)
    (tmp_path / "f").write_bytes(data)
    sizes = guess_parts(len(data), 2)
    assert hash_file(str(tmp_path / "f"), sizes) == (hashlib.md5(data).hexdigest(), etag_of(data, [5 * MiB, 4 * MiB + 7]))


def test_hash_file_in_parts_of_odd_sizes(tmp_path):
    data = os.urandom(2 * MiB + 3)
    (tmp_path / "f").write_bytes(data)
    for sizes in ([1, 2 * MiB + 2], [MiB + 2, MiB + 1], [2, 1, 2 * MiB], [2 * MiB + 3]):
        assert hash_file(str(tmp_path / "f"), sizes) == (hashlib.md5(data).hexdigest(), etag_of(data, sizes))


def test_hash_file_of_a_file_shorter_than_its_parts(tmp_path):
    """The parts run past the end: the last ones hash what is there (nothing), no "+" and no endless read."""
    data = b"0123456789"
    (tmp_path / "f").write_bytes(data)
    assert hash_file(str(tmp_path / "f"), [4, 100]) == (hashlib.md5(data).hexdigest(), etag_of(data, [4, 6]))
    assert hash_file(str(tmp_path / "f"), [100, 5])[1] == etag_of(data, [10, 0])
    assert hash_file(str(tmp_path / "f"), [30]) == (hashlib.md5(data).hexdigest(), etag_of(data, [10]))


def test_hash_file_marks_bytes_past_the_parts(tmp_path):
    data = b"0123456789"
    (tmp_path / "f").write_bytes(data)
    assert hash_file(str(tmp_path / "f"), [4, 5]) == (hashlib.md5(data).hexdigest(), etag_of(data, [4, 5]) + "+")
    assert hash_file(str(tmp_path / "f"), [4, 6]) == (hashlib.md5(data).hexdigest(), etag_of(data, [4, 6]))


def test_hash_file_without_parts_is_the_md5_twice(tmp_path):
    data = os.urandom(MiB + 5)
    (tmp_path / "f").write_bytes(data)
    md5 = hashlib.md5(data).hexdigest()
    assert hash_file(str(tmp_path / "f")) == (md5, md5)
    assert hash_file(str(tmp_path / "f"), []) == (md5, md5)
    (tmp_path / "e").write_bytes(b"")
    assert hash_file(str(tmp_path / "e")) == (EMPTY_MD5, EMPTY_MD5)


def test_sha1_checksum(tmp_path):
    data = os.urandom(3 * MiB + 1)
    (tmp_path / "f").write_bytes(data)
    sha1 = b64(hashlib.sha1(data).digest())
    assert full_object_checksum({"ChecksumSHA1": sha1, "ChecksumType": "FULL_OBJECT"}) == ("sha1", sha1)
    assert full_object_checksum({"ChecksumSHA1": sha1}) == ("sha1", sha1)
    assert checksum_matches(str(tmp_path / "f"), "sha1", sha1)
    assert not checksum_matches(str(tmp_path / "f"), "sha1", b64(hashlib.sha1(data[1:]).digest()))


def test_crc32_checksum_of_a_file_read_in_chunks(tmp_path):
    data = os.urandom(2 * MiB + 11)
    (tmp_path / "f").write_bytes(data)
    crc = b64(zlib.crc32(data).to_bytes(4, "big"))
    assert full_object_checksum({"ChecksumCRC32": crc}) == ("crc32", crc)
    assert checksum_matches(str(tmp_path / "f"), "crc32", crc)
    assert not checksum_matches(str(tmp_path / "f"), "crc32", b64(zlib.crc32(data[:-1]).to_bytes(4, "big")))
    (tmp_path / "e").write_bytes(b"")
    assert checksum_matches(str(tmp_path / "e"), "crc32", "AAAAAA==")
    assert checksum_matches(str(tmp_path / "e"), "sha256", b64(hashlib.sha256(b"").digest()))


def test_sha256_checksum_of_a_file_read_in_chunks(tmp_path):
    data = os.urandom(MiB + 3)
    (tmp_path / "f").write_bytes(data)
    assert checksum_matches(str(tmp_path / "f"), "sha256", b64(hashlib.sha256(data).digest()))
    assert not checksum_matches(str(tmp_path / "f"), "sha256", b64(hashlib.sha256(data[:MiB]).digest()))


def test_which_checksum_of_a_head_is_used():
    sha256, sha1, crc = b64(b"a" * 32), b64(b"b" * 20), b64(b"c" * 4)
    head = {"ChecksumSHA256": sha256, "ChecksumSHA1": sha1, "ChecksumCRC32": crc}
    assert full_object_checksum(head) == ("sha256", sha256)  # the strongest first
    assert full_object_checksum({"ChecksumSHA1": sha1, "ChecksumCRC32": crc}) == ("sha1", sha1)
    # a composite (per-part) value "<b64>-N" is skipped for the next full-object one
    assert full_object_checksum({"ChecksumSHA256": sha256 + "-3", "ChecksumCRC32": crc}) == ("crc32", crc)
    assert full_object_checksum({"ChecksumSHA256": sha256 + "-3"}) is None
    assert full_object_checksum({"ChecksumSHA256": "", "ChecksumSHA1": None, "ChecksumCRC32": crc}) == ("crc32", crc)
    assert full_object_checksum({**head, "ChecksumType": "COMPOSITE"}) is None
    assert full_object_checksum({**head, "ChecksumType": "FULL_OBJECT"}) == ("sha256", sha256)
    assert full_object_checksum({}) is None
    assert full_object_checksum({"ChecksumType": "FULL_OBJECT"}) is None
