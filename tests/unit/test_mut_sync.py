"""``sync.run`` in detail (from the mutation survivors of tritonfleet/agent/sync.py), against a moto S3 server
on loopback: source URLs, range sizes, the client's configuration, one-line errors, what each kind of sync
leaves on disk and says in its result (requests, counts, resumed and linked files, warnings, pruning), the
progress it reports and how downloads are checked and retried."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

import pytest

from tests.unit import test_agent_sync as base
from tritonfleet.agent import sync
from tritonfleet.agent.fetch import range_size
from tritonfleet.agent.layout import Repo
from tritonfleet.agent.manifest import MANIFEST_NAME, SyncError
from tritonfleet.agent.sync import Options, Progress, Result, describe, make_client, parse_source

MiB = 1024 * 1024
AWS_ENV, put = base.AWS_ENV, base.put
endpoint, s3, bucket = base.endpoint, base.s3, base.bucket  # the moto S3 server on loopback and a bucket


def set_remote(s3, bucket: str, tree: dict[str, bytes], prefix: str = "repo") -> None:
    base.set_remote(s3, bucket, prefix, tree)


def read_tree(root) -> dict[str, bytes]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if rel != MANIFEST_NAME:
                out[rel] = open(p, "rb").read()
    return out


def manifest(dest, version: str | None = None) -> dict:
    root = os.path.join(dest, "versions", version) if version else os.path.join(dest, "current")
    return json.loads(open(os.path.join(root, MANIFEST_NAME)).read())


def versions(dest) -> list[str]:
    return sorted(os.listdir(os.path.join(dest, "versions")))


class Recorder(Progress):
    def __init__(self) -> None:
        self.begun: list[tuple[int, int]] = []
        self.advanced = 0
        self.done = 0

    def begin(self, files: int, nbytes: int) -> None:
        self.begun.append((files, nbytes))

    def advance(self, nbytes: int) -> None:
        self.advanced += nbytes

    def file_done(self) -> None:
        self.done += 1


def go(endpoint, bucket, dest, progress=None, live=None, prefix="repo/", **kw) -> Result:
    opts = Options(bucket=bucket, prefix=prefix, dest=str(dest), endpoint_url=endpoint, **kw)
    return sync.run(opts, progress, live)


def ok(result: Result) -> Result:
    assert result.error is None and result.status != "failed", result.error
    return result


TREE = {"a/1/x": b"x" * 10, "a/config.pbtxt": b"a", "b/1/y": b"yy", "b/config.pbtxt": b"b", "top": b"t"}


# --- pure helpers ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("largest, size", [
    (0, 8 * MiB), (1, 8 * MiB), (64 * MiB, 8 * MiB), (64 * MiB + 1, 9 * MiB), (72 * MiB, 9 * MiB),
    (100 * MiB, 13 * MiB), (512 * MiB, 64 * MiB), (513 * MiB, 64 * MiB), (10 * 1024 * MiB, 64 * MiB),
    (8 * 9 * MiB - 1, 9 * MiB), (8 * 9 * MiB + 1, 10 * MiB),
])
def test_range_size(largest, size):
    assert range_size(largest) == size and type(range_size(largest)) is int


@pytest.mark.parametrize("url, parsed", [
    ("s3://bucket", ("bucket", "")),
    ("s3://bucket/", ("bucket", "")),
    ("s3://bucket/prod", ("bucket", "prod/")),
    ("s3://bucket/prod/", ("bucket", "prod/")),
    ("s3://my.bucket-1/a b/c", ("my.bucket-1", "a b/c/")),
    ("s3://abc/x\ny", None),
    ("s3://b0c/p~", ("b0c", "p~/")),
    ("s3://" + "a" * 63 + "/p", ("a" * 63, "p/")),
])
def test_parse_source(url, parsed):
    if parsed is None:
        with pytest.raises(ValueError) as err:
            parse_source(url)
        assert str(err.value) == f"control character in the prefix of {url!r}"
    else:
        assert parse_source(url) == parsed


@pytest.mark.parametrize("url", ["s3://ab/p", "s3://" + "a" * 64 + "/p", "s3://a..b/p", "s3://Bucket/p",
                                 "s3://-bucket/p", "s3://bucket-/p", "S3://bucket/p", "s3:/bucket/p",
                                 "xs3://bucket/p", "s3://bu_ck/p", ""])
def test_parse_source_refuses(url):
    with pytest.raises(ValueError) as err:
        parse_source(url)
    assert str(err.value) == f"not an S3 URL s3://BUCKET[/PREFIX]: {url!r}"


@pytest.mark.parametrize("char", ["\x00", "\x1f", "\x7f", "\t"])
def test_control_characters_in_the_prefix_are_refused(char):
    with pytest.raises(ValueError, match="control character in the prefix"):
        parse_source(f"s3://bucket/p{char}q")
    assert parse_source("s3://bucket/p q\x80") == ("bucket", "p q\x80/")


def test_the_source_of_options():
    assert Options(bucket="b", prefix="p/", dest="/d").source == "s3://b/p/"
    assert Options(bucket="b", prefix="", dest="/d").source == "s3://b/"
    o = Options(bucket="b", prefix="", dest="/d")
    assert (o.endpoint_url, o.region, o.path_style, o.concurrency, o.keep, o.retries, o.allow_empty, o.dry_run,
            o.durable) == (None, None, False, 16, 3, 3, False, False, True)


def test_a_result_starts_failed_and_empty():
    r = Result()
    assert (r.status, r.version, r.previous, r.unchanged, r.downloaded, r.bytes, r.linked, r.resumed, r.retries,
            r.reload, r.seconds, r.error) == ("failed", None, None, 0, 0, 0, 0, 0, 0, None, 0.0, None)
    assert r.files == r.models == {"added": [], "changed": [], "removed": []}
    assert (r.unverified, r.pruned, r.requests, r.warnings) == ([], [], {}, [])
    assert Result().files is not r.files and Result().models is not r.models


def test_the_client_s_configuration(endpoint):
    opts = Options(bucket="b", prefix="", dest="/d", endpoint_url=endpoint, region="eu-west-3", path_style=True,
                   concurrency=5)
    client = make_client(opts)
    c = client.meta.config
    assert client.meta.endpoint_url == endpoint and client.meta.region_name == "eu-west-3"
    # the timeouts: the options' where they are options, else 10 s to connect and 60 s to read
    assert c.connect_timeout == getattr(opts, "connect_timeout", 10) and c.read_timeout == getattr(opts, "read_timeout", 60)
    assert c.max_pool_connections == 9
    assert c.retries["mode"] == "standard" and "tritonfleet-agent" in c.user_agent_extra
    assert c.s3 == {"addressing_style": "path"}
    plain = make_client(Options(bucket="b", prefix="", dest="/d")).meta
    assert plain.config.s3 is None and plain.region_name == "us-east-1" and "amazonaws.com" in plain.endpoint_url


# --- one-line errors ---------------------------------------------------------------------------------------------


def client_error(code: str, message: str | None = "boom", op: str = "GetObject"):
    from botocore.exceptions import ClientError

    err: dict = {"Code": code}
    if message is not None:
        err["Message"] = message
    return ClientError({"Error": err}, op)


def test_describe_client_errors():
    assert describe(client_error("AccessDenied", "Access  Denied")) == "GetObject: AccessDenied: Access  Denied"
    assert describe(client_error("AccessDenied", None)) == "GetObject: AccessDenied: no message"
    assert describe(client_error("AccessDenied", "")) == "GetObject: AccessDenied: no message"
    for code in ("PreconditionFailed", "412"):
        assert describe(client_error(code, "x", "HeadObject")) == \
            f"HeadObject: an object changed in S3 while syncing ({code}); run the sync again"


def test_describe_an_error_response_without_a_code_or_operation():
    exc = RuntimeError("wrapped")
    exc.response = {"Error": {}}
    assert describe(exc) == "request: ?: no message"
    exc.response = {"NoError": {}}
    assert describe(exc) == "RuntimeError: wrapped"
    exc.response = "Error"
    assert describe(exc) == "RuntimeError: wrapped"


def test_describe_finds_the_client_error_behind_other_errors():
    def chain(depth: int, via_cause: bool) -> BaseException:
        exc: BaseException = client_error("SlowDown", "Please reduce")
        for i in range(depth):
            outer = RuntimeError(f"layer {i}")
            if via_cause:
                outer.__cause__ = exc
            else:
                outer.__context__ = exc
            exc = outer
        return exc

    for via_cause in (True, False):
        assert describe(chain(1, via_cause)) == "GetObject: SlowDown: Please reduce"
        assert describe(chain(4, via_cause)) == "GetObject: SlowDown: Please reduce"  # five looked at
        assert describe(chain(10, via_cause)) == "RuntimeError: layer 9"  # too deep


def test_describe_other_errors():
    from botocore.exceptions import NoCredentialsError

    assert describe(NoCredentialsError()) == ("no AWS credentials found (boto3's default chain: environment, "
                                              "config files, instance profile)")
    assert describe(SyncError("one\n  two   three")) == "one two three"
    assert describe(OSError(" disk \n full ")) == "OSError: disk full"


# --- whole syncs --------------------------------------------------------------------------------------------------


def test_a_first_sync_then_a_noop(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, TREE)
    put(s3, bucket, "repo/folder/", b"")  # a folder marker: skipped
    put(s3, bucket, "other/z", b"not below the prefix")
    put(s3, bucket, "repository", b"not below the prefix either")
    rec = Recorder()
    started = time.monotonic()
    r = ok(go(endpoint, bucket, tmp_path, rec))
    elapsed = time.monotonic() - started
    assert (r.status, r.previous, r.error, r.warnings) == ("synced", None, None, [])
    assert r.version == versions(tmp_path)[0] and os.readlink(tmp_path / "current") == f"versions/{r.version}"
    assert read_tree(tmp_path / "current") == TREE
    assert r.files == {"added": sorted(TREE), "changed": [], "removed": []}
    assert r.models == {"added": ["a", "b"], "changed": [], "removed": []}
    assert (r.downloaded, r.bytes, r.linked, r.resumed, r.retries, r.unchanged) == (5, 15, 0, 0, 0, 0)
    assert r.requests == {"GetObject": 5, "ListObjectsV2": 1} and list(r.requests) == sorted(r.requests)
    assert rec.begun == [(5, 15)] and rec.advanced == 15 and rec.done == 5
    assert 0 < r.seconds <= elapsed + 0.0005 and round(r.seconds, 3) == r.seconds and r.pruned == [] and r.unverified == []
    doc = manifest(tmp_path)
    assert doc["source"] == f"s3://{bucket}/repo/" and doc["version"] == r.version
    files = {f["path"]: f for f in doc["files"]}
    assert files["a/1/x"] == {"path": "a/1/x", "key": "repo/a/1/x", "size": 10, "etag": hashlib.md5(TREE["a/1/x"]).hexdigest(),
                              "md5": hashlib.md5(TREE["a/1/x"]).hexdigest(), "verified": "md5"}
    assert (tmp_path / "current/a/1/x").stat().st_mode & 0o777 == 0o644

    rec = Recorder()
    r2 = ok(go(endpoint, bucket, tmp_path, rec))
    assert (r2.status, r2.version, r2.previous, r2.unchanged) == ("unchanged", r.version, r.version, 5)
    assert r2.requests == {"ListObjectsV2": 1} and rec.begun == [] and versions(tmp_path) == [r.version]


def test_no_prefix_takes_the_whole_bucket(endpoint, s3, bucket, tmp_path):
    put(s3, bucket, "m/1/x", b"x")
    put(s3, bucket, "m/config.pbtxt", b"c")
    r = ok(go(endpoint, bucket, tmp_path, prefix=""))
    assert read_tree(tmp_path / "current") == {"m/1/x": b"x", "m/config.pbtxt": b"c"}
    assert manifest(tmp_path)["source"] == f"s3://{bucket}/" and r.models["added"] == ["m"]


def test_a_listing_over_several_pages(endpoint, s3, bucket, tmp_path, monkeypatch):
    tree = {f"m/1/f{i:04d}": str(i).encode() for i in range(1005)}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=bucket, Key="repo/" + kv[0], Body=kv[1]), tree.items()))
    r = ok(go(endpoint, bucket, tmp_path, dry_run=True))
    assert r.requests == {"ListObjectsV2": 2} and len(r.files["added"]) == 1005


def test_identical_objects_are_downloaded_once_and_linked(endpoint, s3, bucket, tmp_path):
    same = os.urandom(3000)
    set_remote(s3, bucket, {"a/1/w": same, "b/1/w": same, "c/1/w": same, "c/1/other": b"o"})
    rec = Recorder()
    r = ok(go(endpoint, bucket, tmp_path, rec))
    assert r.requests["GetObject"] == 2 and (r.downloaded, r.linked, r.bytes) == (2, 2, 3001)
    assert rec.begun == [(2, 3001)] and rec.done == 2
    inodes = {(tmp_path / "current" / p).stat().st_ino for p in ("a/1/w", "b/1/w", "c/1/w")}
    assert len(inodes) == 1
    files = {f["path"]: f for f in manifest(tmp_path)["files"]}
    assert {files[p]["md5"] for p in ("a/1/w", "b/1/w", "c/1/w")} == {hashlib.md5(same).hexdigest()}
    assert {files[p]["verified"] for p in ("a/1/w", "b/1/w", "c/1/w")} == {"md5"}


def test_an_incremental_sync_links_what_it_has(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, TREE)
    first = ok(go(endpoint, bucket, tmp_path))
    tree2 = {**TREE, "a/1/x": b"changed", "c/1/z": b"new"}
    del tree2["top"]
    set_remote(s3, bucket, tree2)
    rec = Recorder()
    r = ok(go(endpoint, bucket, tmp_path, rec))
    assert (r.status, r.previous) == ("synced", first.version)
    assert (r.downloaded, r.linked, r.resumed, r.bytes, r.unchanged) == (2, 3, 0, 10, 3)
    assert rec.begun == [(2, 10)] and r.requests == {"GetObject": 2, "ListObjectsV2": 1}
    old = tmp_path / "versions" / first.version
    for p in ("a/config.pbtxt", "b/1/y", "b/config.pbtxt"):
        assert (tmp_path / "current" / p).stat().st_ino == (old / p).stat().st_ino
    files = {f["path"]: f for f in manifest(tmp_path)["files"]}
    assert files["b/1/y"]["md5"] == hashlib.md5(b"yy").hexdigest() and files["b/1/y"]["verified"] == "md5"
    assert read_tree(tmp_path / "current") == tree2 and versions(tmp_path) == [first.version, r.version]


def test_a_current_version_without_a_readable_manifest_is_downloaded_again(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, TREE)
    first = ok(go(endpoint, bucket, tmp_path))
    (tmp_path / "versions" / first.version / MANIFEST_NAME).write_text("{broken")
    r = ok(go(endpoint, bucket, tmp_path))
    assert r.status == "synced" and r.downloaded == 5 and r.linked == 0 and r.previous == first.version
    assert len(r.warnings) == 1 and r.warnings[0].startswith(f"current version {first.version} has no readable "
                                                             "manifest (") and r.warnings[0].endswith(
        "); downloading everything")
    assert r.files["added"] == sorted(TREE) and read_tree(tmp_path / "current") == TREE


def test_an_empty_listing(endpoint, s3, bucket, tmp_path):
    r = go(endpoint, bucket, tmp_path)
    assert (r.status, r.version) == ("failed", None)
    assert r.error == (f"no objects under s3://{bucket}/repo/; refusing to empty the repository "
                       "(--allow-empty to accept)")
    r = ok(go(endpoint, bucket, tmp_path, allow_empty=True))
    assert r.status == "synced" and read_tree(tmp_path / "current") == {} and manifest(tmp_path)["files"] == []


def test_a_dry_run_counts_what_it_would_download(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, TREE)
    first = ok(go(endpoint, bucket, tmp_path))
    set_remote(s3, bucket, {**TREE, "a/1/x": b"1234", "c/1/z": b"123456"})
    r = ok(go(endpoint, bucket, tmp_path, dry_run=True))
    assert (r.status, r.version, r.previous, r.bytes, r.downloaded) == ("dry-run", first.version, first.version,
                                                                       10, 0)
    assert r.files == {"added": ["c/1/z"], "changed": ["a/1/x"], "removed": []} and r.unchanged == 4
    assert versions(tmp_path) == [first.version] and r.requests == {"ListObjectsV2": 1}


def test_back_to_an_older_version_is_a_switch(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, TREE)
    v1 = ok(go(endpoint, bucket, tmp_path)).version
    set_remote(s3, bucket, {**TREE, "top": b"v2"})
    v2 = ok(go(endpoint, bucket, tmp_path)).version
    set_remote(s3, bucket, {**TREE, "top": b"v3"})
    v3 = ok(go(endpoint, bucket, tmp_path)).version
    (tmp_path / "versions" / v2 / MANIFEST_NAME).write_text("{}")  # unreadable: skipped
    set_remote(s3, bucket, {**TREE, "top": b"v2"})
    r = ok(go(endpoint, bucket, tmp_path, keep=5))
    assert r.status == "synced" and r.version not in (v1, v2, v3)  # v2's manifest is no good: built again
    set_remote(s3, bucket, TREE)
    r = ok(go(endpoint, bucket, tmp_path, keep=5))
    assert (r.status, r.version, r.downloaded, r.requests) == ("switched", v1, 0, {"ListObjectsV2": 1})
    assert os.readlink(tmp_path / "current") == f"versions/{v1}"


def test_the_newest_twin_is_switched_to(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, TREE)
    v1 = ok(go(endpoint, bucket, tmp_path)).version
    set_remote(s3, bucket, {**TREE, "top": b"v2"})
    ok(go(endpoint, bucket, tmp_path))
    # a twin of v1 (say, restored by hand): the newest one wins
    repo = Repo(str(tmp_path))
    twin = "000003-" + v1.split("-", 1)[1]
    shutil.copytree(repo.path(v1), repo.path(twin))
    set_remote(s3, bucket, TREE)
    r = ok(go(endpoint, bucket, tmp_path, keep=5))
    assert (r.status, r.version) == ("switched", twin)


def test_pruning_after_a_sync(endpoint, s3, bucket, tmp_path):
    made = []
    for i in range(3):
        set_remote(s3, bucket, {**TREE, "top": str(i).encode()})
        made.append(ok(go(endpoint, bucket, tmp_path, keep=2)))
    assert made[2].pruned == [made[0].version] and versions(tmp_path) == [made[1].version, made[2].version]
    r = ok(go(endpoint, bucket, tmp_path, keep=1))
    assert (r.status, r.pruned) == ("unchanged", [made[1].version])


def test_a_dead_run_s_staging_is_reused_then_removed(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, TREE)
    repo = Repo(str(tmp_path))
    with repo.locked():  # what a killed run leaves: a staging dir with two checked files journaled
        staging = repo.new_staging()
        from tritonfleet.agent.manifest import Entry

        for path in ("a/1/x", "b/1/y"):
            src = os.path.join(staging.parts, "dl")
            with open(src, "wb") as f:
                f.write(TREE[path])
            md5 = hashlib.md5(TREE[path]).hexdigest()
            staging.place(Entry(path=path, key="repo/" + path, size=len(TREE[path]), etag=md5, md5=md5,
                                verified="md5"), src, link=False)
        staging.close()
    rec = Recorder()
    r = ok(go(endpoint, bucket, tmp_path, rec))
    assert (r.resumed, r.linked, r.downloaded, r.requests["GetObject"]) == (2, 2, 3, 3)
    assert rec.begun == [(3, 3)]
    assert read_tree(tmp_path / "current") == TREE and versions(tmp_path) == [r.version]
    files = {f["path"]: f for f in manifest(tmp_path)["files"]}
    assert files["a/1/x"]["verified"] == "md5" and files["a/1/x"]["md5"] == hashlib.md5(TREE["a/1/x"]).hexdigest()


def test_stale_staging_dirs_go_even_when_nothing_changed(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, TREE)
    v = ok(go(endpoint, bucket, tmp_path)).version
    os.makedirs(tmp_path / "versions" / ".staging-000007-20250101T000000Z" / "tree")
    r = ok(go(endpoint, bucket, tmp_path))
    assert r.status == "unchanged" and versions(tmp_path) == [v]


def test_an_empty_object_needs_no_get(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, {"m/1/empty": b"", "m/config.pbtxt": b"c"})
    r = ok(go(endpoint, bucket, tmp_path))
    assert r.requests == {"GetObject": 1, "ListObjectsV2": 1} and r.downloaded == 2
    assert read_tree(tmp_path / "current") == {"m/1/empty": b"", "m/config.pbtxt": b"c"}
    files = {f["path"]: f for f in manifest(tmp_path)["files"]}
    assert files["m/1/empty"]["verified"] == "md5" and files["m/1/empty"]["md5"] == hashlib.md5(b"").hexdigest()


def test_a_multipart_object_is_checked_with_the_guessed_part_size(endpoint, s3, bucket, tmp_path):
    data = os.urandom(9 * MiB + 7)
    put(s3, bucket, "repo/big/1/w", data, part_size=5 * MiB)
    rec = Recorder()
    r = ok(go(endpoint, bucket, tmp_path, rec))
    assert r.requests == {"GetObject": 2, "ListObjectsV2": 1}  # two ranged GETs of 8 MiB, no HEAD
    assert rec.advanced == len(data) and rec.begun == [(1, len(data))]
    assert manifest(tmp_path)["files"][0]["verified"] == "multipart-md5"
    assert (tmp_path / "current/big/1/w").read_bytes() == data


def test_a_multipart_object_of_other_part_sizes_asks_for_part_one(endpoint, s3, bucket, tmp_path):
    data = os.urandom(13 * MiB)
    put(s3, bucket, "repo/big/1/w", data, part_size=6 * MiB)  # the guess says 5 MiB parts
    r = ok(go(endpoint, bucket, tmp_path))
    assert r.requests == {"GetObject": 2, "HeadObject": 1, "ListObjectsV2": 1}
    assert manifest(tmp_path)["files"][0]["verified"] == "multipart-md5" and r.retries == 0


def test_a_multipart_object_of_parts_of_several_sizes(endpoint, s3, bucket, tmp_path):
    parts = [os.urandom(5 * MiB + 1), os.urandom(5 * MiB), b"end"]
    key = "repo/odd/1/w"
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)
    done = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key=key, PartNumber=n, UploadId=up["UploadId"],
                                                      Body=d)["ETag"]} for n, d in enumerate(parts, 1)]
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up["UploadId"], MultipartUpload={"Parts": done})
    r = ok(go(endpoint, bucket, tmp_path))
    assert r.requests["HeadObject"] == 4 and r.retries == 0
    assert manifest(tmp_path)["files"][0]["verified"] == "multipart-md5"


# --- failures ----------------------------------------------------------------------------------------------------


corrupt_gets = base.corrupt_gets  # GETs of keys ending in a suffix corrupted, the first n times


def test_a_corrupt_download_is_retried(endpoint, s3, bucket, tmp_path, monkeypatch):
    set_remote(s3, bucket, TREE)
    state = corrupt_gets(monkeypatch, "a/1/x", times=2)
    rec = Recorder()
    r = ok(go(endpoint, bucket, tmp_path, rec))
    assert (r.retries, r.downloaded, state["left"]) == (2, 5, 0) and r.requests["GetObject"] == 7
    assert rec.done == 5 and read_tree(tmp_path / "current") == TREE


def test_a_download_that_never_matches_fails_after_the_retries(endpoint, s3, bucket, tmp_path, monkeypatch):
    set_remote(s3, bucket, TREE)
    corrupt_gets(monkeypatch, "a/1/x", times=99)
    r = go(endpoint, bucket, tmp_path, retries=2)
    md5 = hashlib.md5(TREE["a/1/x"]).hexdigest()
    assert r.status == "failed" and r.retries == 1 and r.version is None
    assert r.error.startswith(f"s3://{bucket}/repo/a/1/x: content does not match the ETag {md5} (got ")
    assert r.error.endswith(") (after 2 download attempts)")
    assert not (tmp_path / "current").exists()
    (left,) = versions(tmp_path)  # the staging dir, for the next run to resume from
    assert left.startswith(".staging-000001-")
    journal = [json.loads(line)["path"] for line in open(tmp_path / "versions" / left / "journal")]
    assert "a/1/x" not in journal and sorted(journal) == sorted(journal) and set(journal) <= set(TREE)


def test_an_unreachable_endpoint_is_one_line(tmp_path, monkeypatch):
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    r = go("http://127.0.0.1:9", "bucket", tmp_path)
    assert r.status == "failed" and "connect" in r.error.lower() and "127.0.0.1:9" in r.error and "\n" not in r.error
    assert list(r.requests) == ["ListObjectsV2"] and r.seconds > 0  # (retried or not) and nothing else


def test_a_file_missing_from_the_current_version_is_downloaded_not_linked(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, TREE)
    first = ok(go(endpoint, bucket, tmp_path))
    os.unlink(tmp_path / "versions" / first.version / "b/1/y")  # lost on disk, still in the manifest
    set_remote(s3, bucket, {**TREE, "top": b"new"})
    r = ok(go(endpoint, bucket, tmp_path))
    assert (r.downloaded, r.linked) == (2, 3) and read_tree(tmp_path / "current") == {**TREE, "top": b"new"}


def test_a_dry_run_after_an_unreadable_manifest_has_no_version(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, TREE)
    first = ok(go(endpoint, bucket, tmp_path))
    (tmp_path / "versions" / first.version / MANIFEST_NAME).write_text("[]")
    r = ok(go(endpoint, bucket, tmp_path, dry_run=True))
    assert (r.status, r.version, r.previous, r.bytes) == ("dry-run", None, first.version, 15)
    assert r.files["added"] == sorted(TREE) and len(r.warnings) == 1


def test_downloads_are_mode_0644_whatever_the_umask(endpoint, s3, bucket, tmp_path):
    set_remote(s3, bucket, TREE)
    old = os.umask(0o077)
    try:
        ok(go(endpoint, bucket, tmp_path))
    finally:
        os.umask(old)
    assert {(tmp_path / "current" / p).stat().st_mode & 0o777 for p in TREE} == {0o644}


def test_one_attempt_only(endpoint, s3, bucket, tmp_path, monkeypatch):
    set_remote(s3, bucket, TREE)
    corrupt_gets(monkeypatch, "b/1/y", times=1)
    r = go(endpoint, bucket, tmp_path, retries=1, concurrency=1)
    assert r.status == "failed" and r.retries == 0 and r.error.endswith("(after 1 download attempts)")
    assert r.error.startswith(f"s3://{bucket}/repo/b/1/y: content does not match the ETag ")


def test_a_multipart_object_whose_last_part_is_the_second(endpoint, s3, bucket, tmp_path):
    """11 MiB in 8 MiB parts: the guess (6 MiB) is wrong, part 1's size (8 MiB) makes the ETag match."""
    data = os.urandom(11 * MiB)
    put(s3, bucket, "repo/big/1/w", data, part_size=8 * MiB)
    r = ok(go(endpoint, bucket, tmp_path))
    assert r.requests["HeadObject"] == 1 and r.retries == 0
    assert manifest(tmp_path)["files"][0]["verified"] == "multipart-md5"


# --- objects whose ETag is no md5 (SSE-KMS, SSE-C): what S3 says, played on moto's answers -------------------


FAKE = "0123456789abcdef0123456789abcdef"  # what S3 lists for an SSE-KMS object: no md5 of its bytes


def no_md5_etag(monkeypatch, suffix: str, etag: str = FAKE, head: dict | None = None, checksum: dict | None = None,
                head_etag: str | None = None) -> list[dict]:
    """Make S3 (moto) answer for keys ending in ``suffix`` as for an encrypted object: the listing and
    HeadObject give ``etag`` (HeadObject ``head_etag`` if given) and the ``head`` fields, HeadObject with
    ChecksumMode ENABLED the ``checksum`` fields (and no other); a GET If-Match that ETag matches. Returns the HeadObject
    calls' parameters."""
    heads: list[dict] = []
    real = sync.make_client

    def patched(opts):
        client = real(opts)
        etags: dict[str, str] = {}

        def on_list(parsed, **kwargs):
            for obj in parsed.get("Contents", []):
                if obj["Key"].endswith(suffix):
                    etags[f'"{etag}"'] = obj["ETag"]
                    obj["ETag"] = f'"{etag}"'

        def remember(params, context, **kwargs):
            context["tf_params"] = dict(params)

        def on_head(parsed, context, **kwargs):
            params = context.get("tf_params", {})
            if params.get("Key", "").endswith(suffix):
                heads.append(params)
                if "PartNumber" not in params:
                    parsed["ETag"] = f'"{head_etag or etag}"'
                    parsed.update(head or {})
                    for name in [n for n in parsed if n.startswith("Checksum")]:  # moto's own: only ours
                        del parsed[name]
                    if params.get("ChecksumMode") == "ENABLED":
                        parsed.update(checksum or {})

        def if_match(params, **kwargs):
            headers = params.get("headers", {})
            if headers.get("If-Match") in etags:
                headers["If-Match"] = etags[headers["If-Match"]]

        client.meta.events.register("after-call.s3.ListObjectsV2", on_list)
        client.meta.events.register("before-parameter-build.s3.HeadObject", remember)
        client.meta.events.register("after-call.s3.HeadObject", on_head)
        client.meta.events.register("before-call.s3.GetObject", if_match)
        return client

    monkeypatch.setattr(sync, "make_client", patched)
    return heads


def b64(digest: bytes) -> str:
    import base64

    return base64.b64encode(digest).decode()


@pytest.mark.parametrize("head", [{"ServerSideEncryption": "aws:kms"}, {"ServerSideEncryption": "aws:kms:dsse"},
                                  {"SSECustomerAlgorithm": "AES256"}], ids=["kms", "dsse", "sse-c"])
def test_an_encrypted_object_is_checked_by_its_checksum(endpoint, s3, bucket, tmp_path, monkeypatch, head):
    import zlib

    set_remote(s3, bucket, TREE)
    data = TREE["a/1/x"]
    heads = no_md5_etag(monkeypatch, "a/1/x", head=head,
                        checksum={"ChecksumSHA256": b64(hashlib.sha256(data).digest()),
                                  "ChecksumCRC32": b64(zlib.crc32(data).to_bytes(4, "big"))})
    r = ok(go(endpoint, bucket, tmp_path))
    assert heads == [{"Bucket": bucket, "Key": "repo/a/1/x", "ChecksumMode": "ENABLED"}]
    assert r.requests == {"GetObject": 5, "HeadObject": 1, "ListObjectsV2": 1} and r.unverified == []
    files = {f["path"]: f for f in manifest(tmp_path)["files"]}
    assert files["a/1/x"]["verified"] == "sha256" and files["a/1/x"]["etag"] == FAKE
    assert files["a/1/x"]["md5"] == hashlib.md5(data).hexdigest()


@pytest.mark.parametrize("head", [{"ServerSideEncryption": "aws:kms"}, {"SSECustomerAlgorithm": "AES256"}],
                         ids=["kms", "sse-c"])
def test_an_encrypted_object_without_a_checksum_is_checked_by_its_size(endpoint, s3, bucket, tmp_path, monkeypatch,
                                                                       head):
    set_remote(s3, bucket, TREE)
    no_md5_etag(monkeypatch, "b/1/y", head=head)
    r = ok(go(endpoint, bucket, tmp_path))
    assert r.unverified == ["b/1/y"] and r.downloaded == 5
    files = {f["path"]: f for f in manifest(tmp_path)["files"]}
    assert files["b/1/y"]["verified"] == "size" and files["a/1/x"]["verified"] == "md5"


def test_an_encrypted_multipart_object_without_a_checksum(endpoint, s3, bucket, tmp_path, monkeypatch):
    set_remote(s3, bucket, TREE)
    no_md5_etag(monkeypatch, "b/1/y", etag=FAKE + "-3", head={"ServerSideEncryption": "aws:kms"})
    r = ok(go(endpoint, bucket, tmp_path))
    assert r.unverified == ["b/1/y"]


def test_an_encrypted_object_whose_checksum_does_not_match(endpoint, s3, bucket, tmp_path, monkeypatch):
    set_remote(s3, bucket, TREE)
    no_md5_etag(monkeypatch, "b/1/y", head={"ServerSideEncryption": "aws:kms"},
                checksum={"ChecksumSHA1": b64(hashlib.sha1(b"other").digest())})
    r = go(endpoint, bucket, tmp_path, retries=2)
    assert r.status == "failed" and r.retries == 1 and r.requests["HeadObject"] == 1  # asked once
    assert r.error == (f"s3://{bucket}/repo/b/1/y: content does not match the object's sha1 checksum "
                       "(after 2 download attempts)")


def test_a_plain_object_whose_etag_does_not_match_is_refused(endpoint, s3, bucket, tmp_path, monkeypatch):
    """No encryption: the ETag is the md5, so a mismatch is a bad download, whatever checksum there is."""
    set_remote(s3, bucket, TREE)
    data = TREE["b/1/y"]
    no_md5_etag(monkeypatch, "b/1/y", head={"ServerSideEncryption": "AES256"},
                checksum={"ChecksumSHA256": b64(hashlib.sha256(data).digest())})
    r = go(endpoint, bucket, tmp_path, retries=1)
    assert r.status == "failed"
    assert r.error == (f"s3://{bucket}/repo/b/1/y: content does not match the ETag {FAKE} "
                       f"(got {hashlib.md5(data).hexdigest()}) (after 1 download attempts)")


def test_an_etag_in_no_s3_form_is_checked_by_checksum_or_size(endpoint, s3, bucket, tmp_path, monkeypatch):
    set_remote(s3, bucket, TREE)
    no_md5_etag(monkeypatch, "b/1/y", etag="opaque-etag")
    r = ok(go(endpoint, bucket, tmp_path))
    assert r.unverified == ["b/1/y"]


def test_an_object_changed_between_the_listing_and_the_check(endpoint, s3, bucket, tmp_path, monkeypatch):
    set_remote(s3, bucket, TREE)
    no_md5_etag(monkeypatch, "b/1/y", head={"ServerSideEncryption": "aws:kms"}, head_etag="f" * 32)
    r = go(endpoint, bucket, tmp_path)
    assert r.status == "failed" and r.retries == 0
    assert r.error == f"s3://{bucket}/repo/b/1/y changed in S3 while syncing; run the sync again"


# --- with servers to reload (a Triton stand-in that records its requests) -------------------------------------


class Triton:
    """``/v2/health/ready`` and the repository API; the first load of a model in ``fail`` answers 400."""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        from tests.stubhttp import QuietHandler, serve

        self.requests: list[str] = []
        self.fail = set(fail)
        outer = self

        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802
                outer.requests.append(f"GET {self.path}")
                self._reply(200)

            def do_POST(self):  # noqa: N802
                outer.requests.append(f"POST {self.path}")
                model, action = self.path.split("/")[4:6]
                if action == "load" and model in outer.fail:
                    outer.fail.discard(model)
                    return self._reply(400, b'{"error": "broken"}')
                self._reply(200)

        self.server, self.url = serve(Handler)

    def calls(self) -> list[str]:
        return [":".join(r.split("/")[4:6]) for r in self.requests if r.startswith("POST")]


@pytest.fixture
def triton():
    made = []

    def make(**kw):
        made.append(Triton(**kw))
        return made[-1]

    yield make
    for t in made:
        t.server.shutdown()
        t.server.server_close()


def live_for(t: Triton):
    from tritonfleet.agent.live import Live, Server

    return Live([Server("t", t.url)], None, 5)


def test_a_noop_sync_asks_nothing_of_the_servers(endpoint, s3, bucket, tmp_path, triton):
    set_remote(s3, bucket, TREE)
    ok(go(endpoint, bucket, tmp_path))
    t = triton()
    live = live_for(t)
    r = ok(go(endpoint, bucket, tmp_path, live=live))
    assert r.status == "unchanged" and t.requests == []
    assert r.reload == {"servers": [], "skipped": [], "loaded": [], "unloaded": [], "failed": {},
                        "rolled_back": False, "pending": False}


def test_a_reload_owed_by_a_killed_run_is_done_by_a_noop_sync(endpoint, s3, bucket, tmp_path, triton):
    set_remote(s3, bucket, TREE)
    v1 = ok(go(endpoint, bucket, tmp_path)).version
    set_remote(s3, bucket, {**TREE, "a/1/x": b"v2", "c/1/z": b"new"})
    v2 = ok(go(endpoint, bucket, tmp_path)).version
    (tmp_path / ".reload-pending.json").write_text(json.dumps({"served": v1}))
    t = triton()
    r = ok(go(endpoint, bucket, tmp_path, dry_run=True, live=live_for(t)))
    assert r.reload["pending"] is True and t.requests == []
    r = ok(go(endpoint, bucket, tmp_path, live=live_for(t)))
    assert (r.status, r.version) == ("unchanged", v2)
    assert sorted(t.calls()) == ["a:load", "c:load"]
    assert r.reload["loaded"] == ["a", "c"] and not (tmp_path / ".reload-pending.json").exists()
    r = ok(go(endpoint, bucket, tmp_path, dry_run=True, live=live_for(t)))
    assert r.reload["pending"] is False


def test_a_sync_whose_reload_fails_reports_the_version_switched_back_to(endpoint, s3, bucket, tmp_path, triton):
    set_remote(s3, bucket, TREE)
    v1 = ok(go(endpoint, bucket, tmp_path)).version
    set_remote(s3, bucket, {**TREE, "a/1/x": b"v2"})
    t = triton(fail=("a",))
    r = go(endpoint, bucket, tmp_path, live=live_for(t))
    assert (r.status, r.version, r.previous) == ("failed", v1, v1)
    assert r.error.startswith("model a did not load (HTTP 400: broken); switched back to ")
    assert r.reload["rolled_back"] is True and os.readlink(tmp_path / "current") == f"versions/{v1}"
    assert t.calls() == ["a:load", "a:load"]  # failed, then loaded again from v1
    assert r.pruned == []


def test_a_sync_with_servers_loads_what_changed(endpoint, s3, bucket, tmp_path, triton):
    set_remote(s3, bucket, TREE)
    ok(go(endpoint, bucket, tmp_path))
    set_remote(s3, bucket, {**TREE, "b/1/y": b"v2"})
    t = triton()
    r = ok(go(endpoint, bucket, tmp_path, live=live_for(t)))
    assert r.status == "synced" and t.calls() == ["b:load"] and r.reload["loaded"] == ["b"]
    assert t.requests[0] == "GET /v2/health/ready"


def test_ranged_gets_of_an_eighth_of_the_largest_object(endpoint, s3, bucket, tmp_path):
    """64 MiB + 1: ranges of 9 MiB (an eighth, whole MiB), so 8 GETs, not the 9 of s3transfer's 8 MiB default."""
    data = os.urandom(64 * MiB + 1)
    put(s3, bucket, "repo/big/1/w", data)
    r = ok(go(endpoint, bucket, tmp_path))
    assert r.requests == {"GetObject": 8, "ListObjectsV2": 1} and r.bytes == len(data)
    assert (tmp_path / "current/big/1/w").read_bytes() == data


class LockReader(Recorder):
    """Reads the lock file, as another sync waiting for it would, while this run holds it (when it begins its
    downloads)."""

    def __init__(self, dest) -> None:
        super().__init__()
        self.lock = os.path.join(dest, ".lock")
        self.records: list[dict] = []

    def begin(self, files: int, nbytes: int) -> None:
        super().begin(files, nbytes)
        with open(self.lock) as fh:
            self.records.append(json.load(fh))


@pytest.mark.parametrize("deadline", [300.0, 45.5, None])
def test_the_lock_records_the_runs_bound_the_s3_deadline_and_the_switch(endpoint, s3, bucket, tmp_path, deadline):
    """Another run that waits for the lock ends this one only once it is well past the bound it recorded: the S3
    part's deadline plus the switch's own bound; without a deadline, no bound (never "stuck")."""
    set_remote(s3, bucket, TREE)
    dest = tmp_path / "models"
    reader = LockReader(dest)
    before = time.time()
    ok(go(endpoint, bucket, dest, reader, deadline=deadline))
    after = time.time()
    (record,) = reader.records
    assert record["pid"] == os.getpid()
    if deadline is None:
        assert record["until"] is None
    else:
        bound = deadline + sync.SWITCH_BOUND
        assert before + bound - 0.1 <= record["until"] <= after + bound + 0.1, (record, before, after)


def test_a_model_whose_file_rotted_on_disk_is_loaded_again_from_the_repaired_version(endpoint, s3, bucket, tmp_path,
                                                                                      triton):
    """The servers load again exactly the models whose files the new version repaired (by model name, the path's
    first part), the others are left alone."""
    set_remote(s3, bucket, TREE)
    ok(go(endpoint, bucket, tmp_path))
    with open(tmp_path / "current/a/1/x", "ab") as f:  # another size than its manifest's: found without hashing
        f.write(b"!")
    t = triton()
    r = ok(go(endpoint, bucket, tmp_path, live=live_for(t)))
    assert r.status == "synced" and r.repaired == {"a/1/x": "size 11, expected 10"}, r
    assert sorted(t.calls()) == ["a:load"] and r.reload["loaded"] == ["a"], (t.calls(), r.reload)
    assert read_tree(tmp_path / "current") == TREE
