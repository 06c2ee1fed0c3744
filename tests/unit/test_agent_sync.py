"""`tritonfleet-agent sync` against a real moto S3 server on loopback: full, no-op and incremental syncs,
checks of what is downloaded, failures that switch nothing, resuming, pruning and the command line."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from moto.server import ThreadedMotoServer

from tritonfleet.agent import cli, layout, sync
from tritonfleet.agent.manifest import MANIFEST_NAME

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
# Only what the agent needs to reach moto: fake keys, no config files, no instance metadata service.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
           "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="module")
def endpoint():
    """A moto S3 server on 127.0.0.1 (its own port) and the fake credentials in the environment."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in AWS_ENV.items():
            mp.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
        server.stop()


@pytest.fixture
def s3(endpoint):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture
def bucket(s3):
    name = f"agent-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def put(s3, bucket: str, key: str, data: bytes, part_size: int | None = None) -> None:
    """Upload; with ``part_size`` as a multipart upload in parts of that size (a "<md5>-N" ETag)."""
    if part_size:
        config = TransferConfig(multipart_threshold=part_size, multipart_chunksize=part_size)
        s3.upload_fileobj(io.BytesIO(data), bucket, key, Config=config)
    else:
        s3.put_object(Bucket=bucket, Key=key, Body=data)


def set_remote(s3, bucket: str, prefix: str, tree: dict[str, bytes]) -> None:
    """Make ``s3://bucket/prefix/`` hold exactly ``tree`` (uploading only what differs)."""
    have = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for obj in page.get("Contents", ()):
            have[obj["Key"][len(prefix) + 1:]] = obj["ETag"].strip('"')
    for path, data in tree.items():
        if have.get(path) != hashlib.md5(data).hexdigest():
            put(s3, bucket, f"{prefix}/{path}", data)
    for path in set(have) - set(tree):
        s3.delete_object(Bucket=bucket, Key=f"{prefix}/{path}")


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file below root (the manifest aside) by its relative path."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if rel != MANIFEST_NAME:
                out[rel] = p.read_bytes()
    return out


def sample_tree(seed: int, models: int = 3, files: int = 4, size: int = 20_000) -> dict[str, bytes]:
    """``models`` models of ``files`` random files (up to ``size`` bytes) and a config.pbtxt each."""
    rnd = random.Random(seed)
    tree = {f"model{m}/1/part{f}.bin": rnd.randbytes(rnd.randint(1, size)) for m in range(models) for f in range(files)}
    tree.update({f"model{m}/config.pbtxt": f'name: "model{m}"\n'.encode() for m in range(models)})
    return tree


def agent(capsys, *args: str) -> tuple[int, dict | str, str]:
    """Run the command line in this process: (exit code, the --json object or the stdout text, stderr)."""
    try:
        code = cli.main(list(args))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, (json.loads(out) if "--json" in args and out else out), err


def sync_args(endpoint: str, bucket: str, dest: Path, *extra: str, prefix: str = "repo") -> list[str]:
    return ["sync", "--source", f"s3://{bucket}/{prefix}", "--dest", str(dest), "--endpoint-url", endpoint,
            "--json", *extra]


def versions(dest: Path) -> list[str]:
    return sorted(p.name for p in (dest / "versions").iterdir() if not p.name.startswith("."))


# --- full, no-op and incremental syncs -------------------------------------------------------------------------


def test_full_sync_then_noop_sends_no_get(endpoint, s3, bucket, tmp_path, capsys):
    tree = sample_tree(1, models=4, files=6, size=300_000)  # a few MB
    tree["big/1/model.bin"] = os.urandom(9 * MiB + 7)
    set_remote(s3, bucket, "repo", {k: v for k, v in tree.items() if k != "big/1/model.bin"})
    put(s3, bucket, "repo/big/1/model.bin", tree["big/1/model.bin"], part_size=5 * MiB)
    put(s3, bucket, "repo/empty/", b"")  # a "folder" marker: skipped
    dest = tmp_path / "models"

    code, full, err = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert (code, full["status"], err) == (0, "synced", "")
    assert read_tree(dest / "current") == tree
    assert full["downloaded"] == len(tree) and full["bytes"] == sum(map(len, tree.values()))
    assert full["models"] == {"added": ["big", "model0", "model1", "model2", "model3"], "changed": [], "removed": []}
    # one GET per object (two ranged GETs for the 9 MiB one) and no HEAD: the multipart ETag's 5 MiB part size
    # is the whole-MiB size its part count implies (verify.guess_parts), which the md5 of md5s confirms
    assert full["requests"] == {"GetObject": len(tree) + 1, "ListObjectsV2": 1}
    manifest = json.loads((dest / "current" / MANIFEST_NAME).read_text())
    entries = {e["path"]: e for e in manifest["files"]}
    assert entries["big/1/model.bin"]["verified"] == "multipart-md5"
    assert entries["big/1/model.bin"]["etag"].endswith("-2")
    assert {e["verified"] for p, e in entries.items() if p != "big/1/model.bin"} == {"md5"}
    assert all(e["md5"] == hashlib.md5(tree[p]).hexdigest() for p, e in entries.items())
    assert os.readlink(dest / "current") == f"versions/{full['version']}"

    code, noop, err = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert (code, noop["status"], noop["version"], err) == (0, "unchanged", full["version"], "")
    assert noop["requests"] == {"ListObjectsV2": 1}  # zero GET, zero HEAD
    assert noop["unchanged"] == len(tree) and versions(dest) == [full["version"]]
    print(f"\nfull sync {full['bytes'] / 1e6:.1f} MB: {full['seconds']} s {full['requests']}; "
          f"no-op: {noop['seconds']} s {noop['requests']}")


def test_incremental_downloads_only_what_changed(endpoint, s3, bucket, tmp_path, capsys):
    tree = sample_tree(2)
    set_remote(s3, bucket, "repo", tree)
    dest = tmp_path / "models"
    code, first, _ = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert code == 0
    old_root = dest / "versions" / first["version"]

    tree2 = dict(tree)
    tree2["model0/1/part1.bin"] = b"changed"
    tree2["model3/1/model.onnx"] = b"a new model"
    del tree2["model2/1/part0.bin"]
    set_remote(s3, bucket, "repo", tree2)
    code, second, _ = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert (code, second["status"], second["previous"]) == (0, "synced", first["version"])
    assert second["files"] == {"added": ["model3/1/model.onnx"], "changed": ["model0/1/part1.bin"],
                               "removed": ["model2/1/part0.bin"]}
    assert second["models"] == {"added": ["model3"], "changed": ["model0", "model2"], "removed": []}
    assert second["requests"]["GetObject"] == 2 and second["downloaded"] == 2
    assert second["linked"] == second["unchanged"] == len(tree) - 2
    new_root = dest / "current"
    assert read_tree(new_root) == tree2
    for path in tree2.keys() & tree.keys():
        if tree2[path] == tree[path]:  # unchanged: the same inode as in the previous version
            assert (new_root / path).stat().st_ino == (old_root / path).stat().st_ino
    assert read_tree(old_root) == tree  # the previous version is intact
    assert not (new_root / "model2/1/part0.bin").exists()

    del tree2["model3/1/model.onnx"]
    set_remote(s3, bucket, "repo", tree2)
    code, third, _ = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert third["models"] == {"added": [], "changed": [], "removed": ["model3"]}
    assert third["requests"] == {"ListObjectsV2": 1}  # nothing to download: all linked
    assert read_tree(dest / "current") == tree2


@pytest.mark.parametrize("damage", [b"grown", b""], ids=["grown", "truncated"])
def test_a_previous_file_whose_size_is_not_its_manifests_is_downloaded_not_linked(endpoint, s3, bucket, tmp_path,
                                                                                  capsys, damage):
    """The manifest of the current version says a file has the listed ETag and size, but the file on disk has
    another size (edited in place, cut short): the next version downloads it instead of linking it."""
    tree = sample_tree(4, models=2, files=3)
    set_remote(s3, bucket, "repo", tree)
    dest = tmp_path / "m"
    code, first, err = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert code == 0, err
    old_root = dest / "versions" / first["version"]
    bad = "model0/1/part0.bin"
    kept = tree[bad][:-1] + damage  # one byte cut, or five added: another size whatever the content
    (old_root / bad).write_bytes(kept)
    assert len(kept) != len(tree[bad])

    tree2 = {**tree, "model1/1/part2.bin": b"changed"}  # something changed: a new version is built
    set_remote(s3, bucket, "repo", tree2)
    code, second, err = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert (code, second["status"]) == (0, "synced"), err
    assert second["files"]["changed"] == ["model1/1/part2.bin"]  # by the manifest, bad is unchanged
    assert second["downloaded"] == 2 and second["linked"] == len(tree2) - 2
    assert second["requests"]["GetObject"] == 2
    new_root = dest / "current"
    assert (new_root / bad).read_bytes() == tree[bad]
    assert (new_root / bad).stat().st_ino != (old_root / bad).stat().st_ino
    assert (old_root / bad).read_bytes() == kept  # the previous version is left as it is
    for path in tree2.keys() - {bad, "model1/1/part2.bin"}:  # the rest: linked
        assert (new_root / path).stat().st_ino == (old_root / path).stat().st_ino


def test_back_to_an_older_version_switches_without_downloading(endpoint, s3, bucket, tmp_path, capsys):
    tree = sample_tree(3)
    set_remote(s3, bucket, "repo", tree)
    dest = tmp_path / "m"
    first = agent(capsys, *sync_args(endpoint, bucket, dest))[1]
    set_remote(s3, bucket, "repo", {**tree, "model0/1/part0.bin": b"v2"})
    second = agent(capsys, *sync_args(endpoint, bucket, dest))[1]
    set_remote(s3, bucket, "repo", tree)
    code, third, _ = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert (code, third["status"], third["version"]) == (0, "switched", first["version"])
    assert third["previous"] == second["version"] and third["requests"] == {"ListObjectsV2": 1}
    assert third["files"]["changed"] == ["model0/1/part0.bin"] and third["models"]["changed"] == ["model0"]
    assert read_tree(dest / "current") == tree


def test_multipart_parts_of_several_sizes_are_verified(endpoint, s3, bucket, tmp_path, capsys):
    """Parts of 5 MiB + 1, 5 MiB and 3 bytes: the uniform guess from part 1 is wrong, each part's size
    (HeadObject PartNumber=N) makes the ETag match."""
    parts = [os.urandom(5 * MiB + 1), os.urandom(5 * MiB), b"end"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="repo/odd/1/model.bin")
    done = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key="repo/odd/1/model.bin", PartNumber=n,
                                                      UploadId=upload["UploadId"], Body=data)["ETag"]}
            for n, data in enumerate(parts, 1)]
    s3.complete_multipart_upload(Bucket=bucket, Key="repo/odd/1/model.bin", UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": done})
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, tmp_path))
    assert (code, out["retries"], err) == (0, 0, "")
    assert (tmp_path / "current/odd/1/model.bin").read_bytes() == b"".join(parts)
    assert out["requests"]["HeadObject"] == 1 + 1 + 2  # part 1, the whole object (is the ETag an md5?), parts 2-3
    manifest = json.loads((tmp_path / "current" / MANIFEST_NAME).read_text())
    assert manifest["files"][0]["verified"] == "multipart-md5"


# --- failures: nothing is switched ---------------------------------------------------------------------------


class _Flipped:
    """A GetObject body whose first byte comes back flipped."""

    def __init__(self, body) -> None:
        self._body = body
        self._first = True

    def read(self, amt=None):
        data = self._body.read(amt)
        if self._first and data:
            self._first = False
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        return data

    def __getattr__(self, name):
        return getattr(self._body, name)


def corrupt_gets(monkeypatch, key_suffix: str, times: int) -> dict:
    """Make the agent's client corrupt the first ``times`` GET responses for keys ending in key_suffix."""
    state = {"left": times}
    make_client = sync.make_client

    def patched(opts):
        client = make_client(opts)

        def flip(parsed, model, context, **kwargs):
            if state["left"] and context.get("tf_key", "").endswith(key_suffix) and "Body" in parsed:
                state["left"] -= 1
                parsed["Body"] = _Flipped(parsed["Body"])

        def remember(params, context, **kwargs):
            context["tf_key"] = params["Key"]

        client.meta.events.register("before-parameter-build.s3.GetObject", remember)
        client.meta.events.register("after-call.s3.GetObject", flip)
        return client

    monkeypatch.setattr(sync, "make_client", patched)
    return state


@pytest.mark.parametrize("part_size", [None, 5 * MiB], ids=["single-part", "multipart"])
def test_corrupt_download_is_retried(endpoint, s3, bucket, tmp_path, capsys, monkeypatch, part_size):
    data = os.urandom(11 * MiB if part_size else 50_000)
    set_remote(s3, bucket, "repo", sample_tree(4))
    put(s3, bucket, "repo/model0/1/weights.bin", data, part_size)
    state = corrupt_gets(monkeypatch, "weights.bin", times=1)
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, tmp_path))
    assert (code, out["status"], out["retries"], state["left"], err) == (0, "synced", 1, 0, "")
    assert (tmp_path / "current/model0/1/weights.bin").read_bytes() == data


def test_corrupt_download_fails_after_retries_and_switches_nothing(endpoint, s3, bucket, tmp_path, capsys,
                                                                    monkeypatch):
    tree = sample_tree(5)
    set_remote(s3, bucket, "repo", tree)
    first = agent(capsys, *sync_args(endpoint, bucket, tmp_path))[1]
    set_remote(s3, bucket, "repo", {**tree, "model1/1/part2.bin": b"new weights"})
    corrupt_gets(monkeypatch, "part2.bin", times=99)
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, tmp_path, "--retries", "3"))
    assert (code, out["status"], out["retries"]) == (1, "failed", 2)
    assert "model1/1/part2.bin" in out["error"] and "does not match the ETag" in out["error"]
    assert err.count("\n") == 1 and err.startswith("tritonfleet-agent: error: ")
    assert os.readlink(tmp_path / "current") == f"versions/{first['version']}"
    assert versions(tmp_path) == [first["version"]] and read_tree(tmp_path / "current") == tree


@pytest.mark.parametrize("concurrency", ["1", "16"])
def test_object_replaced_during_sync_fails_the_sync(endpoint, s3, bucket, tmp_path, capsys, monkeypatch,
                                                    concurrency):
    """Every GET is conditional on the listed ETag: an object replaced after the listing fails the sync, one
    download at a time or many."""
    set_remote(s3, bucket, "repo", sample_tree(6))
    listing = sync.Remote.list

    def list_then_replace(self, b, prefix):
        out = listing(self, b, prefix)
        put(s3, bucket, "repo/model1/1/part0.bin", b"replaced after the listing")
        return out

    monkeypatch.setattr(sync.Remote, "list", list_then_replace)
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, tmp_path, "--concurrency", concurrency))
    assert code == 1 and "an object changed in S3 while syncing" in out["error"], out["error"]
    assert "HeadObject" not in out["requests"]  # the conditional GET failed; no download to check
    assert not (tmp_path / "current").exists() and versions(tmp_path) == []


def test_empty_prefix_is_refused_unless_allowed(endpoint, s3, bucket, tmp_path, capsys):
    set_remote(s3, bucket, "repo", {"a/1/x": b"x"})
    assert agent(capsys, *sync_args(endpoint, bucket, tmp_path))[0] == 0
    s3.delete_object(Bucket=bucket, Key="repo/a/1/x")
    code, out, _ = agent(capsys, *sync_args(endpoint, bucket, tmp_path))
    assert code == 1 and "refusing to empty" in out["error"] and read_tree(tmp_path / "current") == {"a/1/x": b"x"}
    code, out, _ = agent(capsys, *sync_args(endpoint, bucket, tmp_path, "--allow-empty"))
    assert (code, out["models"]["removed"]) == (0, ["a"]) and read_tree(tmp_path / "current") == {}


def test_bad_keys_fail_the_sync(endpoint, s3, bucket, tmp_path, capsys):
    set_remote(s3, bucket, "repo", {"a/1/x": b"x", "a/1/x/y": b"y"})
    code, out, _ = agent(capsys, *sync_args(endpoint, bucket, tmp_path))
    assert code == 1 and "both a file and a directory" in out["error"]
    set_remote(s3, bucket, "repo", {"a/../x": b"x"})
    code, out, _ = agent(capsys, *sync_args(endpoint, bucket, tmp_path))
    assert code == 1 and "cannot be a file path" in out["error"] and not (tmp_path / "x").exists()


def test_dry_run_downloads_nothing(endpoint, s3, bucket, tmp_path, capsys):
    set_remote(s3, bucket, "repo", sample_tree(7))
    code, out, _ = agent(capsys, *sync_args(endpoint, bucket, tmp_path, "--dry-run"))
    assert (code, out["status"], out["requests"]) == (0, "dry-run", {"ListObjectsV2": 1})
    assert len(out["files"]["added"]) == 15 and versions(tmp_path) == []


# --- resuming, pruning ---------------------------------------------------------------------------------------


class _Crash(BaseException):
    """Stands for the process dying: nothing catches it."""


def test_a_dead_runs_downloads_are_reused(endpoint, s3, bucket, tmp_path, capsys, monkeypatch):
    tree = sample_tree(8)
    set_remote(s3, bucket, "repo", tree)
    place = layout.Staging.place
    calls = []

    def place_then_die(self, entry, src, link):
        if len(calls) == 5:
            raise _Crash
        calls.append(entry.path)
        place(self, entry, src, link)

    monkeypatch.setattr(layout.Staging, "place", place_then_die)
    with pytest.raises(_Crash):
        cli.main(sync_args(endpoint, bucket, tmp_path, "--concurrency", "1"))
    capsys.readouterr()
    assert not (tmp_path / "current").exists() and len(list((tmp_path / "versions").glob(".staging-*"))) == 1
    monkeypatch.setattr(layout.Staging, "place", place)

    code, out, _ = agent(capsys, *sync_args(endpoint, bucket, tmp_path))
    assert (code, out["resumed"], out["requests"]["GetObject"]) == (0, 5, len(tree) - 5)
    assert read_tree(tmp_path / "current") == tree
    assert [p.name for p in (tmp_path / "versions").iterdir()] == [out["version"]]  # no staging left


def test_pruning_keeps_n_versions(endpoint, s3, bucket, tmp_path, capsys):
    tree = sample_tree(9, models=1, files=2)
    made = []
    for i in range(4):
        set_remote(s3, bucket, "repo", {**tree, "model0/1/step": str(i).encode()})
        code, out, _ = agent(capsys, *sync_args(endpoint, bucket, tmp_path, "--keep", "2"))
        assert code == 0
        made.append(out["version"])
        assert versions(tmp_path) == made[-2:]
    assert out["pruned"] == [made[1]]
    code, out, _ = agent(capsys, *sync_args(endpoint, bucket, tmp_path, "--keep", "1"))  # a no-op prunes too
    assert (out["status"], out["pruned"], versions(tmp_path)) == ("unchanged", [made[2]], [made[3]])
    assert os.readlink(tmp_path / "current") == f"versions/{made[3]}"


# --- the command line ----------------------------------------------------------------------------------------


def test_summary_line(endpoint, s3, bucket, tmp_path, capsys):
    set_remote(s3, bucket, "repo", {"a/1/x": b"x", "b/1/y": b"y"})
    args = [a for a in sync_args(endpoint, bucket, tmp_path) if a != "--json"]
    code, out, _ = agent(capsys, *args)
    assert code == 0 and out.count("\n") == 1
    assert out.startswith("synced 000001-") and "2 added, 0 changed, 0 removed, 0 unchanged" in out
    assert out.rstrip().endswith("models: +a +b")
    code, out, _ = agent(capsys, *args)
    assert out.startswith("no changes: 000001-") and out.count("\n") == 1


def test_progress_line_on_a_terminal(endpoint, s3, bucket, tmp_path, capsys, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    set_remote(s3, bucket, "repo", sample_tree(11))
    monkeypatch.setattr(sys, "stderr", Terminal())
    args = [a for a in sync_args(endpoint, bucket, tmp_path) if a != "--json"]
    code, out, _ = agent(capsys, *args)
    progress = sys.stderr.getvalue()
    assert code == 0 and out.startswith("synced ") and out.count("\n") == 1
    assert progress.startswith("\rdownloading 0/15 files, 0 B of ") and "downloading 15/15 files" in progress
    assert progress.endswith("\r") and "\n" not in progress  # the line is cleared, the summary goes to stdout


def test_modes_whatever_the_umask(endpoint, s3, bucket, tmp_path, capsys):
    set_remote(s3, bucket, "repo", {"a/1/x": b"x"})
    old = os.umask(0o077)
    try:
        assert agent(capsys, *sync_args(endpoint, bucket, tmp_path))[0] == 0
    finally:
        os.umask(old)
    assert (tmp_path / "current/a/1/x").stat().st_mode & 0o777 == 0o644
    assert {(tmp_path / "current" / d).stat().st_mode & 0o777 for d in ("", "a", "a/1")} == {0o755}


@pytest.mark.parametrize("args, message", [
    ([], "the following arguments are required: COMMAND"),
    (["sync", "--dest", "/tmp/x"], "the following arguments are required: --source"),
    (["sync", "--source", "s3://Bad_Bucket/p", "--dest", "/tmp/x"], "not an S3 URL"),
    (["sync", "--source", "http://bucket/p", "--dest", "/tmp/x"], "not an S3 URL"),
    (["sync", "--source", "s3://bucket/p", "--dest", "/tmp/x", "--concurrency", "0"], "0 is not within 1 to 256"),
    (["sync", "--source", "s3://bucket/p", "--dest", "/tmp/x", "--keep", "two"], "not a whole number"),
    (["sync", "--source", "s3://bucket/p", "--dest", "/tmp/x", "--endpoint-url", "ftp://h"], "not an http(s) URL"),
    (["sync", "--source", "s3://bucket/p", "--dest", "/tmp/x", "--endpoint-url", "http://k:s@h"], "credentials"),
    (["sync", "--source", "s3://bucket/p", "--dest", "/tmp/x", "--region", "US EAST"], "not a region"),
    (["sync", "--source", "s3://bucket/p", "--dest", "/tmp/x", "--access-key", "AKIA"], "unrecognized arguments"),
    (["sync", "--source", "s3://bucket/p", "--dest", __file__], "not a directory"),
    (["launch"], "invalid choice: 'launch'"),
])
def test_bad_arguments_are_one_line_errors(capsys, args, message):
    code, out, err = agent(capsys, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tritonfleet-agent") and message in err, err


def test_console_script_errors_are_one_line(tmp_path):
    """Through the real entry point: a bad argument (2) and an unreachable endpoint (1), no traceback."""
    env = {**os.environ, **AWS_ENV, "AWS_MAX_ATTEMPTS": "1"}
    base = [sys.executable, "-m", "tritonfleet.agent", "sync", "--dest", str(tmp_path / "d")]
    bad = subprocess.run(base + ["--source", "s3://x"], capture_output=True, text=True, env=env, timeout=30)
    assert (bad.returncode, bad.stdout, bad.stderr.count("\n")) == (2, "", 1), bad.stderr
    down = subprocess.run(base + ["--source", "s3://bucket/p", "--endpoint-url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert (down.returncode, down.stdout, down.stderr.count("\n")) == (1, "", 1), down.stderr
    assert "cannot connect to S3 at http://127.0.0.1:9 (" in down.stderr and "refused" in down.stderr
    assert "while listing s3://bucket/p/" in down.stderr and "testing" not in down.stderr
