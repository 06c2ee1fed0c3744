"""Files that rot on the host (issue 20, part 2), against a real moto S3 on loopback: a changed byte and a
deleted file in the current version are found by the next run (a no-op in S3 included), repaired through a
new version and the normal switch, never carried into a new version through the hard-link reuse; ``verify``
hashes everything whatever the stamps."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.unit import test_agent_sync as base
from tritonfleet.agent import integrity, sync
from tritonfleet.agent.manifest import MANIFEST_NAME

AWS_ENV, set_remote = base.AWS_ENV, base.set_remote
endpoint, s3, bucket = base.endpoint, base.s3, base.bucket  # the moto S3 server and a bucket (fixtures)

V1 = {"m/config.pbtxt": b"name: 'm'", "m/1/model.bin": bytes(range(256)) * 64, "m/1/vocab.txt": b"a\nb\nc\n",
      "n/config.pbtxt": b"name: 'n'", "n/1/model.bin": b"n" * 5000}


@pytest.fixture
def aws(monkeypatch):
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)


@pytest.fixture
def repo(s3, bucket, endpoint, tmp_path, aws):
    """A repository synced once: (run, dest) where run(**options) syncs again in-process."""
    set_remote(s3, bucket, "p", V1)
    dest = tmp_path / "repo"

    def run(**kw):
        return sync.run(sync.Options(bucket=bucket, prefix="p/", dest=str(dest), endpoint_url=endpoint, durable=False,
                                     **kw))

    first = run()
    assert first.status == "synced", first.error
    return run, dest


def tree(dest) -> dict[str, bytes]:
    root = dest / "current"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != MANIFEST_NAME}


def flip_a_byte(path, keep_mtime=True) -> None:
    """What bit rot or a stray write does: same size, one byte different (the mtime put back, as a careful
    hand or a backup tool would; the ctime still moves)."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0x01]))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_no_op_run_finds_a_changed_byte_and_a_deleted_file_and_repairs_them_through_a_new_version(repo):
    run, dest = repo
    before = os.readlink(dest / "current")
    flip_a_byte(dest / "current/m/1/model.bin")
    os.unlink(dest / "current/n/1/model.bin")
    dry = run(dry_run=True)
    assert dry.status == "dry-run" and set(dry.damaged) == {"m/1/model.bin", "n/1/model.bin"}, dry
    assert os.readlink(dest / "current") == before  # a dry run repairs nothing
    result = run()
    assert result.status == "synced", result.error
    assert result.repaired["n/1/model.bin"] == "missing"
    assert result.repaired["m/1/model.bin"].startswith("content changed (md5 ")
    assert result.downloaded == 2 and result.linked == len(V1) - 2  # only the damaged ones fetched again
    assert os.readlink(dest / "current") != before
    assert tree(dest) == V1
    again = run()
    assert again.status == "unchanged" and again.damaged == {} and again.hashed == 0, again


def test_a_corrupt_file_is_never_carried_into_the_next_version(repo, s3, bucket):
    """The issue's scenario: a byte changed and a file deleted in current, then an unrelated change in S3."""
    run, dest = repo
    flip_a_byte(dest / "current/m/1/model.bin")
    os.unlink(dest / "current/m/1/vocab.txt")
    set_remote(s3, bucket, "p", {**V1, "n/1/model.bin": b"N" * 5000})
    result = run()
    assert result.status == "synced", result.error
    assert set(result.repaired) == {"m/1/model.bin", "m/1/vocab.txt"}
    assert tree(dest) == {**V1, "n/1/model.bin": b"N" * 5000}
    assert "m" in result.models["changed"] or result.repaired  # the model is reloaded (live.repaired)


def test_a_resized_file_is_found_without_hashing(repo):
    run, dest = repo
    with open(dest / "current/n/1/model.bin", "ab") as f:
        f.write(b"x")
    result = run(dry_run=True)
    assert result.damaged == {"n/1/model.bin": "size 5001, expected 5000"} and result.hashed == 0


def test_a_dry_run_without_stamps_only_stats_the_files(repo):
    """A dry run writes nothing, stamps included: on a repository without them (synced before they were kept, or
    the file lost) it checks presence and sizes only, rather than hashing every file on every dry run."""
    run, dest = repo
    os.unlink(dest / integrity.STAMPS)
    result = run(dry_run=True)
    assert result.status == "dry-run" and result.damaged == {} and result.hashed == 0, result
    assert not (dest / integrity.STAMPS).exists()
    assert run().hashed == len(V1)  # a real run without stamps hashes every file once, then stamps them
    assert (dest / integrity.STAMPS).exists()


def test_reuse_checks_the_content_of_a_file_whose_inode_changed_even_when_the_repository_looks_intact(repo, s3,
                                                                                                     bucket):
    """Reuse itself holds the rule, not only the check of current: a source whose inode changed since it was
    stamped is hashed before it is linked (here the stamps file is gone, so nothing is trusted)."""
    run, dest = repo
    os.unlink(dest / integrity.STAMPS)
    set_remote(s3, bucket, "p", {**V1, "extra/config.pbtxt": b"name: 'extra'"})
    result = run()
    assert result.status == "synced" and result.hashed == len(V1), result
    assert result.linked == len(V1) and result.downloaded == 1


def test_verify_hashes_everything_and_repairs_rot_the_stamps_cannot_see(repo, tmp_path):
    """Rot below the filesystem leaves the inode's times alone: only ``verify`` finds it."""
    run, dest = repo
    path = dest / "current/m/1/model.bin"
    flip_a_byte(path)
    stamps = json.loads((dest / integrity.STAMPS).read_text())
    st = os.stat(path)
    stamps["inodes"][str(st.st_ino)] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    (dest / integrity.STAMPS).write_text(json.dumps(stamps))
    quiet = run()
    assert quiet.status == "unchanged" and quiet.damaged == {}  # the stamp says unchanged since checked
    verified = run(verify=True)
    assert verified.status == "synced" and list(verified.repaired) == ["m/1/model.bin"], verified
    assert verified.hashed == len(V1)
    assert tree(dest) == V1


def test_a_version_kept_on_disk_with_a_damaged_file_is_not_switched_back_to(repo, s3, bucket):
    run, dest = repo
    old = os.readlink(dest / "current")
    set_remote(s3, bucket, "p", {**V1, "n/1/model.bin": b"2" * 5000})
    assert run().status == "synced"
    os.unlink(dest / old / "m/1/vocab.txt")  # the kept older version rots
    set_remote(s3, bucket, "p", V1)  # S3 back to what the older version holds
    result = run()
    assert result.status == "synced" and os.readlink(dest / "current") != old, result
    assert tree(dest) == V1


def test_the_command_line_reports_what_was_repaired(repo, bucket, endpoint):
    run, dest = repo
    os.unlink(dest / "current/n/config.pbtxt")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **AWS_ENV}
    proc = subprocess.run([sys.executable, "-m", "tritonfleet.agent", "verify", "--source", f"s3://{bucket}/p",
                           "--dest", str(dest), "--endpoint-url", endpoint, "--no-fsync"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "repaired 1 damaged file: n/config.pbtxt (missing)" in proc.stdout, proc.stdout
    assert tree(dest) == V1


@pytest.fixture
def small_fs(tmp_path):
    """A 2 MiB tmpfs (root only: the development and CI machines run the suite as root)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_disk_too_small_is_refused_before_any_download_naming_the_path_and_the_space(s3, bucket, endpoint,
                                                                                       small_fs, aws):
    set_remote(s3, bucket, "big", {"m/1/model.bin": b"x" * (3 * 1024 * 1024)})
    result = sync.run(sync.Options(bucket=bucket, prefix="big/", dest=str(small_fs / "repo"), endpoint_url=endpoint,
                                   durable=False))
    assert result.status == "failed" and result.downloaded == 0 and result.requests.get("GetObject", 0) == 0
    assert result.error.startswith(f"not enough space on the filesystem of {small_fs}/repo: this sync downloads "
                                   "3.0 MiB (1 files) and needs 67.0 MiB free, "), result.error
    assert "models_s3_keep" in result.error


def test_a_disk_that_fills_during_the_sync_is_one_line_naming_the_path(s3, bucket, endpoint, small_fs, aws,
                                                                      monkeypatch):
    """Another writer took the space after the check: the write fails with ENOSPC, said with the path."""
    monkeypatch.setattr(sync, "_check_space", lambda *a: None)
    set_remote(s3, bucket, "big2", {"m/1/model.bin": b"x" * (3 * 1024 * 1024)})
    result = sync.run(sync.Options(bucket=bucket, prefix="big2/", dest=str(small_fs / "repo"), endpoint_url=endpoint,
                                   durable=False))
    assert result.status == "failed"
    assert result.error.startswith(f"no space left on the filesystem of {small_fs}/repo"), result.error
    assert "free now" in result.error and "Errno" not in result.error
