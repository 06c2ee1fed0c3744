"""Checking downloads against S3: single-part and multipart ETags (the ones moto makes), S3 checksums,
and what the agent does when the ETag is no md5 (SSE-KMS, SSE-C) or the object changed."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import types
import zlib

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from moto import mock_aws

from tritonfleet.agent.fetch import _Fetcher
from tritonfleet.agent.manifest import Entry, SyncError
from tritonfleet.agent.remote import Phase
from tritonfleet.agent.sync import Options
from tritonfleet.agent.verify import (
    checksum_matches,
    etag_parts,
    full_object_checksum,
    hash_file,
    uniform_parts,
)

MiB = 1024 * 1024


@pytest.mark.parametrize("etag, parts", [
    ("d41d8cd98f00b204e9800998ecf8427e", 0),
    ("91f1bb991c909f7e58ce25645ee84a51-2", 2),
    ("91f1bb991c909f7e58ce25645ee84a51-10000", 10000),
    ("91f1bb991c909f7e58ce25645ee84a51-0", None),
    ("91f1bb991c909f7e58ce25645ee84a5", None),
    ("D41D8CD98F00B204E9800998ECF8427E", None),  # the caller lowers the case
    ("not-an-md5", None),
    ("", None),
])
def test_etag_parts(etag, parts):
    assert etag_parts(etag) == parts


@pytest.mark.parametrize("size, first, count, parts", [
    (10, 4, 3, [4, 4, 2]),
    (12, 4, 3, [4, 4, 4]),
    (13, 4, 3, None),  # parts 4, 4, 5: the last larger than the first
    (8, 4, 3, None),  # nothing left for part 3
    (5, 5, 1, [5]),
    (5, 0, 1, None),
])
def test_uniform_parts(size, first, count, parts):
    assert uniform_parts(size, first, count) == parts


def test_hash_file(tmp_path):
    data = os.urandom(3 * MiB + 5)
    path = tmp_path / "f"
    path.write_bytes(data)
    md5 = hashlib.md5(data).hexdigest()
    assert hash_file(str(path)) == (md5, md5)
    sizes = [MiB + 1, MiB + 1, MiB + 3]
    digests = [hashlib.md5(data[:MiB + 1]).digest(), hashlib.md5(data[MiB + 1:2 * MiB + 2]).digest(),
               hashlib.md5(data[2 * MiB + 2:]).digest()]
    assert hash_file(str(path), sizes) == (md5, hashlib.md5(b"".join(digests)).hexdigest() + "-3")
    assert hash_file(str(path), [MiB])[1].endswith("-1+")  # bytes past the parts never match an ETag


@pytest.fixture
def moto_s3(monkeypatch):
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="etags")
        yield client


@pytest.mark.parametrize("size, chunk", [(9 * MiB + 7, 5 * MiB), (16 * MiB, 8 * MiB), (10 * MiB, 5 * MiB)])
def test_multipart_etags_moto_makes(moto_s3, tmp_path, size, chunk):
    """An object over 8 MiB uploaded in parts: its "<md5 of md5s>-N" ETag is matched with part 1's size
    (HeadObject PartNumber=1), and one flipped byte or a wrong part size is caught."""
    data = os.urandom(size)
    moto_s3.upload_fileobj(io.BytesIO(data), "etags", "big.bin",
                           Config=TransferConfig(multipart_threshold=chunk, multipart_chunksize=chunk))
    etag = moto_s3.head_object(Bucket="etags", Key="big.bin")["ETag"].strip('"')
    count = etag_parts(etag)
    assert count == -(-size // chunk)
    first = moto_s3.head_object(Bucket="etags", Key="big.bin", PartNumber=1)["ContentLength"]
    assert first == chunk
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    parts = uniform_parts(size, first, count)
    assert hash_file(str(path), parts) == (hashlib.md5(data).hexdigest(), etag)

    assert hash_file(str(path), uniform_parts(size, first + 1, count) or [size])[1] != etag
    corrupt = bytearray(data)
    corrupt[size // 2] ^= 1
    path.write_bytes(bytes(corrupt))
    assert hash_file(str(path), parts)[1] != etag


def test_single_part_etag_moto_makes(moto_s3, tmp_path):
    data = os.urandom(100_000)
    moto_s3.put_object(Bucket="etags", Key="small", Body=data)
    etag = moto_s3.head_object(Bucket="etags", Key="small")["ETag"].strip('"')
    (tmp_path / "f").write_bytes(data)
    assert etag_parts(etag) == 0 and hash_file(str(tmp_path / "f"))[1] == etag


def test_s3_checksums(moto_s3, tmp_path):
    data = os.urandom(70_000)
    (tmp_path / "f").write_bytes(data)
    sha256 = base64.b64encode(hashlib.sha256(data).digest()).decode()
    crc32 = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    moto_s3.put_object(Bucket="etags", Key="sum", Body=data, ChecksumAlgorithm="SHA256")
    head = moto_s3.head_object(Bucket="etags", Key="sum", ChecksumMode="ENABLED")
    assert full_object_checksum(head) == ("sha256", sha256)
    assert checksum_matches(str(tmp_path / "f"), "sha256", sha256)
    assert checksum_matches(str(tmp_path / "f"), "crc32", crc32)
    assert not checksum_matches(str(tmp_path / "f"), "crc32", sha256)
    assert full_object_checksum({"ChecksumCRC32": crc32}) == ("crc32", crc32)
    assert full_object_checksum({"ChecksumSHA256": sha256, "ChecksumType": "COMPOSITE"}) is None
    assert full_object_checksum({"ChecksumCRC32C": "AAAAAA=="}) is None  # not in the standard library


# --- what the agent makes of a mismatch (a stand-in for HeadObject) -----------------------------------------


class _Head:
    def __init__(self, **head) -> None:
        self.head = head
        self.calls = []

    def head_object(self, **kwargs):
        self.calls.append(kwargs)
        return self.head


def check(tmp_path, data: bytes, etag: str, **head):
    (tmp_path / "f").write_bytes(data)
    client = _Head(ETag=f'"{etag}"', ContentLength=len(data), **head)
    fetcher = _Fetcher(Options(bucket="b", prefix="", dest=str(tmp_path)), types.SimpleNamespace(client=client, phase=Phase()),
                       None, None, None)
    return fetcher._check(str(tmp_path / "f"), Entry(path="f", key="k", size=len(data), etag=etag)), client.calls


def test_md5_etag_match_needs_no_request(tmp_path):
    result, calls = check(tmp_path, b"abc", hashlib.md5(b"abc").hexdigest())
    assert result == (hashlib.md5(b"abc").hexdigest(), "md5") and calls == []


def test_md5_etag_mismatch_is_a_problem(tmp_path):
    result, calls = check(tmp_path, b"abc", hashlib.md5(b"abd").hexdigest())
    assert isinstance(result, str) and "does not match the ETag" in result
    assert calls == [{"Bucket": "b", "Key": "k", "ChecksumMode": "ENABLED"}]


def test_size_mismatch_needs_no_hash(tmp_path):
    (tmp_path / "f").write_bytes(b"abcd")
    fetcher = _Fetcher(Options(bucket="b", prefix="", dest=str(tmp_path)), None, None, None, None)
    assert fetcher._check(str(tmp_path / "f"), Entry(path="f", key="k", size=3, etag="x")) == \
        "downloaded 4 bytes, expected 3"


@pytest.mark.parametrize("sse", [{"ServerSideEncryption": "aws:kms"}, {"ServerSideEncryption": "aws:kms:dsse"},
                                 {"SSECustomerAlgorithm": "AES256"}])
def test_etag_of_encrypted_objects_is_no_md5(tmp_path, sse):
    data = b"model weights"
    sha256 = base64.b64encode(hashlib.sha256(data).digest()).decode()
    md5 = hashlib.md5(data).hexdigest()
    kms_etag = "0123456789abcdef0123456789abcdef"
    assert check(tmp_path, data, kms_etag, ChecksumSHA256=sha256, **sse)[0] == (md5, "sha256")
    assert check(tmp_path, data, kms_etag + "-3", **sse)[0] == (md5, "size")
    bad = check(tmp_path, data, kms_etag, ChecksumSHA256=base64.b64encode(b"x" * 32).decode(), **sse)[0]
    assert bad == "content does not match the object's sha256 checksum"


def test_etag_not_in_s3_form(tmp_path):
    """Some S3-compatible stores make other ETags: a checksum if there is one, else the size."""
    data = b"x" * 10
    assert check(tmp_path, data, "opaque-etag")[0] == (hashlib.md5(data).hexdigest(), "size")


def test_object_changed_since_the_listing(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    client = _Head(ETag='"ffffffffffffffffffffffffffffffff"')
    fetcher = _Fetcher(Options(bucket="b", prefix="", dest=str(tmp_path)), types.SimpleNamespace(client=client, phase=Phase()),
                       None, None, None)
    with pytest.raises(SyncError, match="changed in S3 while syncing"):
        fetcher._check(str(tmp_path / "f"), Entry(path="f", key="k", size=3, etag="0" * 32))
