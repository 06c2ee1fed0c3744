"""The agent's repository directory in detail (from the mutation survivors of tritonfleet/agent/layout.py):
what a staging dir holds and journals, links across filesystems, the lock, which directories count as
versions or staging dirs and in what order, the manifest a commit writes, modes, pruning and removal."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time

import pytest

from tritonfleet.agent.layout import Repo, Staging, fsync_dir, sync_filesystem
from tritonfleet.agent.manifest import MANIFEST_NAME, Entry, SyncError


def entry(path: str, data: bytes, **kw) -> Entry:
    return Entry(path=path, key="p/" + path, size=len(data), etag="e-" + path, **kw)


def put(staging: Staging, path: str, data: bytes, **kw) -> Entry:
    src = os.path.join(staging.parts, "dl")
    with open(src, "wb") as f:
        f.write(data)
    e = entry(path, data, **kw)
    staging.place(e, src, link=False)
    return e


def build(repo: Repo, files: dict[str, bytes], source: str = "s3://b/p/") -> str:
    staging = repo.new_staging()
    for path, data in files.items():
        put(staging, path, data, md5="m", verified="md5")
    staging.close()
    version = repo.commit(staging, staging.placed, source, durable=False)
    repo.remove(os.path.basename(staging.root))
    return version


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# --- staging -------------------------------------------------------------------------------------------------


def test_a_staging_dir_holds_tree_parts_and_a_journal(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        staging = repo.new_staging()
        name = os.path.basename(staging.root)
        assert os.path.dirname(staging.root) == str(tmp_path / "versions")
        assert re.fullmatch(r"\.staging-000001-\d{8}T\d{6}Z", name)
        assert staging.id == name[len(".staging-"):]
        assert sorted(os.listdir(staging.root)) == ["journal", "parts", "tree"]
        assert os.path.isdir(staging.tree) and os.path.isdir(staging.parts)
        assert (staging.tree, staging.parts, staging.journal) == tuple(
            os.path.join(staging.root, n) for n in ("tree", "parts", "journal"))
        staging.close()
        staging.close()  # twice is fine


def test_placed_files_are_journaled_as_they_are_placed(tmp_path):
    """The journal is readable line by line while the run goes on (a kill right after a place keeps it)."""
    repo = Repo(str(tmp_path))
    with repo.locked():
        staging = repo.new_staging()
        a = put(staging, "m/1/a", b"aa", md5="x", verified="md5")
        b = put(staging, "m/1/b", b"bbb")  # same directory: it exists already
        c = put(staging, "n/c", b"c")
        assert staging.placed == {"m/1/a": a, "m/1/b": b, "n/c": c}
        lines = open(staging.journal, encoding="utf-8").read().splitlines()  # not closed yet: flushed
        assert [json.loads(line) for line in lines] == [
            {"path": "m/1/a", "key": "p/m/1/a", "size": 2, "etag": "e-m/1/a", "md5": "x", "verified": "md5"},
            {"path": "m/1/b", "key": "p/m/1/b", "size": 3, "etag": "e-m/1/b", "md5": "", "verified": ""},
            {"path": "n/c", "key": "p/n/c", "size": 1, "etag": "e-n/c", "md5": "", "verified": ""}]
        assert Staging(staging.root).journaled() == {"m/1/a": a, "m/1/b": b, "n/c": c}
        assert (tmp_path / "versions" / os.path.basename(staging.root) / "tree/m/1/b").read_bytes() == b"bbb"
        assert os.listdir(staging.parts) == []  # a download is renamed into the tree
        staging.close()


def test_journaled_skips_bad_lines_and_files_not_in_the_tree(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        staging = repo.new_staging()
        put(staging, "a/x", b"12")
        with open(staging.journal, "a", encoding="utf-8") as f:
            f.write("not json\n")
            f.write('{"path": "a/q"}\n')  # not an entry
            f.write("[1, 2]\n")
        put(staging, "a/y", b"345")
        put(staging, "b/z", b"6")
        put(staging, "b/w", b"77")
        staging.close()
        os.unlink(os.path.join(staging.tree, "a/y"))
        with open(os.path.join(staging.tree, "b/w"), "ab") as f:
            f.write(b"!")  # another size than journaled
        assert sorted(Staging(staging.root).journaled()) == ["a/x", "b/z"]
        assert Staging(str(tmp_path / "versions" / ".staging-none")).journaled() == {}


def test_a_link_across_filesystems_becomes_a_copy(tmp_path, monkeypatch):
    """/dev/shm is another filesystem here: os.link fails with EXDEV and the file is copied instead."""
    if os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is on the same filesystem")
    monkeypatch.chdir(tmp_path)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        src = os.path.join(other, "f")
        with open(src, "wb") as f:
            f.write(b"weights")
        repo = Repo(str(tmp_path))
        os.chdir(other)  # the copy is made in parts/, not in the working directory
        with repo.locked():
            staging = repo.new_staging()
            e = entry("m/1/f", b"weights")
            staging.place(e, src, link=True)
            dst = os.path.join(staging.tree, "m/1/f")
            assert open(dst, "rb").read() == b"weights"
            assert os.stat(dst).st_ino != os.stat(src).st_ino and os.path.exists(src)
            assert os.listdir(staging.parts) == []  # the copy's temporary file was renamed into the tree
            assert staging.placed == {"m/1/f": e} and Staging(staging.root).journaled() == {"m/1/f": e}
            assert os.listdir(other) == ["f"]
            staging.close()
        os.chdir(tmp_path)


def test_a_link_within_the_filesystem_shares_the_inode_and_keeps_the_source(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        staging = repo.new_staging()
        src = tmp_path / "orig"
        src.write_bytes(b"x")
        staging.place(entry("m/x", b"x"), str(src), link=True)
        assert os.stat(os.path.join(staging.tree, "m/x")).st_ino == src.stat().st_ino and src.exists()
        with pytest.raises(FileNotFoundError):  # other link errors are not turned into copies
            staging.place(entry("m/y", b"y"), str(tmp_path / "missing"), link=True)
        with pytest.raises(FileExistsError):
            staging.place(entry("m/x", b"x"), str(src), link=True)
        assert list(staging.placed) == ["m/x"]
        staging.close()


# --- the lock and what it clears ------------------------------------------------------------------------------


def test_the_lock_is_exclusive_and_released(tmp_path):
    repo = Repo(str(tmp_path))
    fds = open_fds()
    with repo.locked():
        with pytest.raises(SyncError) as err, Repo(str(tmp_path)).locked():
            pass
        assert str(err.value).startswith(f"another sync holds {tmp_path}/.lock")
        assert (tmp_path / ".lock").stat().st_mode & 0o777 == 0o644 & ~_umask()
    assert open_fds() == fds
    with Repo(str(tmp_path)).locked():  # twice in a row: nothing left holding it
        pass
    with Repo(str(tmp_path)).locked():
        pass
    assert open_fds() == fds


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_lock_file_mode_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        with Repo(str(tmp_path / "r")).locked():
            pass
    finally:
        os.umask(old)
    assert (tmp_path / "r" / ".lock").stat().st_mode & 0o777 == 0o644


def test_a_relative_root_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    repo = Repo("rel")
    assert (repo.root, repo.versions, repo.current_link) == (
        str(tmp_path / "rel"), str(tmp_path / "rel" / "versions"), str(tmp_path / "rel" / "current"))
    with repo.locked():
        version = build(repo, {"m/x": b"1"})
        repo.switch(version, durable=False)
    monkeypatch.chdir("/")
    assert repo.current() == version and os.readlink(tmp_path / "rel/current") == f"versions/{version}"


def test_current_that_is_a_file_is_refused_with_its_path(tmp_path):
    (tmp_path / "current").write_text("x")
    with pytest.raises(SyncError) as err, Repo(str(tmp_path)).locked():
        pass
    assert str(err.value) == f"{tmp_path}/current exists and is not a symlink; move it away first"


def test_the_lock_clears_trash_and_temporary_links_only(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        version = build(repo, {"m/x": b"1"})
        repo.switch(version, durable=False)
        staging = repo.new_staging()
        staging.close()
    (tmp_path / "versions/.trash-000003-20250101T000000Z/m/1").mkdir(parents=True)
    (tmp_path / "versions/.trash-x").write_text("a file")  # not a directory: left (rmtree ignores errors)
    os.symlink("versions/x", tmp_path / ".current.tmp-1")
    (tmp_path / ".current.tmp-2").write_text("")
    (tmp_path / "keep.txt").write_text("")
    (tmp_path / "versions/keep").mkdir()
    with repo.locked():
        assert sorted(os.listdir(tmp_path)) == [".lock", "current", "keep.txt", "versions"]
        assert sorted(os.listdir(tmp_path / "versions")) == sorted(
            [version, os.path.basename(staging.root), "keep", ".trash-x"])
        assert repo.current() == version


# --- versions, staging dirs, their order ----------------------------------------------------------------------


def test_complete_versions_have_a_manifest_and_sort_by_sequence(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        v = tmp_path / "versions"
        for name in ("1000000-20250101T000000Z", "999999-20250102T000000Z", "000002-20250103T000000Z"):
            (v / name).mkdir()
            (v / name / MANIFEST_NAME).write_text("{}")
        (v / "000003-20250101T000000Z").mkdir()  # no manifest: not complete
        (v / "000004-20250101T000000Z").mkdir()
        (v / "000004-20250101T000000Z" / MANIFEST_NAME).mkdir()  # not a file
        (v / "12345-20250101T000000Z").mkdir()  # not a version name
        (v / "12345-20250101T000000Z" / MANIFEST_NAME).write_text("{}")
        (v / "000005-20250101T000000z").mkdir()
        (v / "000005-20250101T000000z" / MANIFEST_NAME).write_text("{}")
        (v / "000006-20250101t000000Z").mkdir()
        (v / "000006-20250101t000000Z" / MANIFEST_NAME).write_text("{}")
        assert repo.complete() == ["000002-20250103T000000Z", "999999-20250102T000000Z", "1000000-20250101T000000Z"]
        staging = repo.new_staging()
        assert staging.id.startswith("1000001-")
        staging.close()


def test_stale_staging_dirs_newest_first_and_only_real_ones(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        v = tmp_path / "versions"
        for name in (".staging-000002-20250101T000000Z", ".staging-000010-20250101T000000Z",
                     ".staging-000003-20250101T000000Z", ".staging-junk", ".staging-", "000011-20250101T000000Z",
                     ".trash-000012-20250101T000000Z", "staging-000013-20250101T000000Z",
                     ".staging-999999-20250101T000000Z", ".staging-1000000-20250101T000000Z"):
            (v / name).mkdir()
        assert [os.path.basename(s.root) for s in repo.stale_staging()] == [
            ".staging-1000000-20250101T000000Z", ".staging-999999-20250101T000000Z", ".staging-000010-20250101T000000Z", ".staging-000003-20250101T000000Z",
            ".staging-000002-20250101T000000Z"]
        assert [s.id for s in repo.stale_staging()] == ["1000000-20250101T000000Z", "999999-20250101T000000Z",
                                                         "000010-20250101T000000Z", "000003-20250101T000000Z",
                                                         "000002-20250101T000000Z"]
        # the next sequence follows every id on disk, staging included, junk not counted
        staging = repo.new_staging()
        assert staging.id.startswith("1000001-")
        staging.close()


def test_junk_in_versions_counts_as_sequence_zero(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        for name in ("junk", ".staging-x", "7-20250101T000000Z", "0000001-2025T1Z"):
            (tmp_path / "versions" / name).mkdir()
        assert repo.stale_staging() == [] and repo.complete() == []
        staging = repo.new_staging()
        assert staging.id.startswith("000001-")
        staging.close()


def test_current_follows_the_link(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        version = build(repo, {"m/x": b"1"})
        os.symlink(f"versions/{version}/", tmp_path / "current")  # a trailing slash
        assert repo.current() == version
        os.unlink(tmp_path / "current")
        os.symlink(str(tmp_path / "versions" / version), tmp_path / "current")  # absolute
        assert repo.current() == version
        os.unlink(tmp_path / "current")
        os.symlink("versions/not-a-version", tmp_path / "current")
        (tmp_path / "versions/not-a-version").mkdir()
        assert repo.current() is None
        os.unlink(tmp_path / "current")
        assert repo.current() is None


# --- commit, switch, remove, prune ----------------------------------------------------------------------------


def test_commit_writes_the_manifest_and_renames_the_tree(tmp_path):
    repo = Repo(str(tmp_path))
    old = os.umask(0o077)
    try:
        with repo.locked():
            staging = repo.new_staging()
            e = put(staging, "m/1/x", b"abc", md5="900150983cd24fb0d6963f7d28e17f72", verified="md5")
            staging.close()
            before = time.time()
            version = repo.commit(staging, staging.placed, "s3://bucket/prefix/", durable=True)
    finally:
        os.umask(old)
    assert version == staging.id and not os.path.exists(staging.tree)
    root = tmp_path / "versions" / version
    doc = json.loads((root / MANIFEST_NAME).read_text())
    assert doc["version"] == version and doc["source"] == "s3://bucket/prefix/" and doc["format"] == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["created"])
    created = time.mktime(time.strptime(doc["created"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert before - 2 <= created <= time.time() + 1
    assert doc["files"] == [{"path": "m/1/x", "key": e.key, "size": 3, "etag": e.etag, "md5": e.md5,
                             "verified": "md5"}]
    assert repo.manifest(version) == {"m/1/x": e}
    assert {(root / d).stat().st_mode & 0o777 for d in ("", "m", "m/1")} == {0o755}
    assert sorted(os.listdir(staging.root)) == ["journal", "parts"]


@pytest.mark.parametrize("durable", [True, False])
def test_durable_steps_leave_no_file_descriptor_open(tmp_path, durable):
    repo = Repo(str(tmp_path))
    with repo.locked():
        fds = open_fds()
        staging = repo.new_staging()
        put(staging, "m/x", b"1")
        staging.close()
        version = repo.commit(staging, staging.placed, "s3://b/", durable=durable)
        repo.switch(version, durable=durable)
        sync_filesystem(str(tmp_path))
        fsync_dir(str(tmp_path))
        assert open_fds() == fds and repo.current() == version


class SyncfsSpy:
    """libc with its syncfs watched: the path of every descriptor it is given, and what it returns."""

    def __init__(self, lib, seen: list, result: int | None) -> None:
        self.lib, self.seen, self.result = lib, seen, result

    def syncfs(self, fd):
        self.seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        done = self.lib.syncfs(fd)
        return done if self.result is None else self.result


def spy_syncfs(monkeypatch, result: int | None = None) -> tuple[list, list]:
    import ctypes

    seen: list = []
    calls: list = []
    real = ctypes.CDLL
    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: SyncfsSpy(real(*a, **k), seen, result))
    monkeypatch.setattr(os, "sync", lambda: calls.append("sync"))
    return seen, calls


def test_sync_filesystem_flushes_the_filesystem_of_the_path_not_all(tmp_path, monkeypatch):
    seen, calls = spy_syncfs(monkeypatch)
    fds = open_fds()
    sync_filesystem(str(tmp_path))
    assert seen == [str(tmp_path)] and calls == [] and open_fds() == fds


def test_sync_filesystem_falls_back_to_a_global_sync(tmp_path, monkeypatch):
    seen, calls = spy_syncfs(monkeypatch, result=-1)  # syncfs fails
    fds = open_fds()
    sync_filesystem(str(tmp_path))
    assert seen == [str(tmp_path)] and calls == ["sync"] and open_fds() == fds
    seen, calls = spy_syncfs(monkeypatch)
    sync_filesystem(str(tmp_path / "missing"))  # cannot be opened
    (tmp_path / "file").write_text("")
    sync_filesystem(str(tmp_path / "file"))  # not a directory
    assert seen == [] and calls == ["sync", "sync"] and open_fds() == fds


def test_a_durable_commit_flushes_the_tree_before_it_becomes_a_version(tmp_path, monkeypatch):
    repo = Repo(str(tmp_path))
    with repo.locked():
        staging = repo.new_staging()
        put(staging, "m/x", b"1")
        staging.close()
        seen, calls = spy_syncfs(monkeypatch)
        fsynced = []
        fsync = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (fsynced.append(os.readlink(f"/proc/self/fd/{fd}")), fsync(fd))[1])
        version = repo.commit(staging, staging.placed, "s3://b/", durable=True)
        assert seen == [staging.tree] and calls == []
        assert fsynced[-1] == str(tmp_path / "versions")  # the rename reaches the disk
        fsynced.clear()
        repo.switch(version, durable=True)
        assert fsynced == [str(tmp_path)]
        fsynced.clear()
        repo.switch(version, durable=False)
        assert fsynced == []


def test_fsync_dir_needs_a_directory(tmp_path):
    (tmp_path / "file").write_text("")
    fds = open_fds()
    with pytest.raises(NotADirectoryError):
        fsync_dir(str(tmp_path / "file"))
    fsync_dir(str(tmp_path))
    assert open_fds() == fds


def test_switch_replaces_a_leftover_temporary_link_of_the_same_pid(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        version = build(repo, {"m/x": b"1"})
        os.symlink("versions/elsewhere", tmp_path / f".current.tmp-{os.getpid()}")
        repo.switch(version, durable=True)
        assert repo.current() == version and sorted(os.listdir(tmp_path)) == [".lock", "current", "versions"]


def test_a_switch_killed_before_its_rename_leaves_a_link_the_next_lock_clears(tmp_path, monkeypatch):
    repo = Repo(str(tmp_path))
    with repo.locked():
        version = build(repo, {"m/x": b"1"})

        def crash(*args):
            raise KeyboardInterrupt

        monkeypatch.setattr(os, "replace", crash)
        with pytest.raises(KeyboardInterrupt):
            repo.switch(version, durable=False)
        monkeypatch.undo()
        (left,) = [n for n in os.listdir(tmp_path) if n not in (".lock", "versions")]
        assert os.readlink(tmp_path / left) == f"versions/{version}" and not (tmp_path / "current").exists()
    with repo.locked():
        assert sorted(os.listdir(tmp_path)) == [".lock", "versions"]


def test_remove_renames_to_trash_then_deletes(tmp_path, monkeypatch):
    repo = Repo(str(tmp_path))
    with repo.locked():
        version = build(repo, {"m/1/x": b"1", "m/2/y": b"2"})
        staging = repo.new_staging()
        staging.close()
        renames = []
        rename = os.rename
        monkeypatch.setattr(os, "rename", lambda a, b: (renames.append((a, b)), rename(a, b))[1])
        repo.remove(version)
        repo.remove(os.path.basename(staging.root))
        v = str(tmp_path / "versions")
        assert renames == [(f"{v}/{version}", f"{v}/.trash-{version}"),
                           (staging.root, f"{v}/.trash-staging-{staging.id}")]
        assert os.listdir(v) == []
        with pytest.raises(FileNotFoundError):
            repo.remove(version)
        (tmp_path / "versions" / "junk").write_text("not a directory")  # rmtree fails on it: ignored
        repo.remove("junk")
        assert os.listdir(v) == [".trash-junk"]


def test_a_removal_killed_after_its_rename_is_finished_by_the_next_lock(tmp_path, monkeypatch):
    repo = Repo(str(tmp_path))
    with repo.locked():
        version = build(repo, {"m/x": b"1"})
        monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)  # killed right after the rename
        repo.remove(version)
        monkeypatch.undo()
        assert repo.complete() == [] and os.listdir(tmp_path / "versions") == [f".trash-{version}"]
    with repo.locked():
        assert os.listdir(tmp_path / "versions") == []


@pytest.mark.parametrize("keep, current, kept", [
    (2, None, [2, 3]),  # no current: the newest two
    (1, None, [3]),
    (5, None, [0, 1, 2, 3]),  # room for more than there are: nothing goes
    (4, None, [0, 1, 2, 3]),
    (3, 0, [0, 2, 3]),  # the current one counts
    (5, 1, [0, 1, 2, 3]),
    (4, 3, [0, 1, 2, 3]),
    (1, 2, [2]),
    (0, 2, [2]),  # the current one is always kept
    (0, None, []),
])
def test_prune(tmp_path, keep, current, kept):
    repo = Repo(str(tmp_path))
    with repo.locked():
        made = [build(repo, {"m/x": bytes([i])}) for i in range(4)]
        if current is not None:
            repo.switch(made[current], durable=False)
        doomed = repo.prune(keep)
        assert repo.complete() == [made[i] for i in kept]
        assert doomed == [v for v in made if v not in repo.complete()]
        assert sorted(os.listdir(tmp_path / "versions")) == [made[i] for i in kept]


def test_ids_and_creation_times_are_utc_whatever_the_time_zone(tmp_path, monkeypatch):
    import calendar

    monkeypatch.setenv("TZ", "JST-9")  # nine hours ahead of UTC, no tzdata needed
    time.tzset()
    try:
        repo = Repo(str(tmp_path))
        with repo.locked():
            before = time.time()
            version = build(repo, {"m/x": b"1"})
            after = time.time()
        stamp = calendar.timegm(time.strptime(version.split("-", 1)[1], "%Y%m%dT%H%M%SZ"))
        doc = json.loads((tmp_path / "versions" / version / MANIFEST_NAME).read_text())
        created = calendar.timegm(time.strptime(doc["created"], "%Y-%m-%dT%H:%M:%SZ"))
        assert before - 2 <= stamp <= after + 1 and before - 2 <= created <= after + 1
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
