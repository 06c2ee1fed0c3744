"""The agent's directory layout without S3: staging, commit, the switch of ``current``, pruning, the lock
and what a dead run leaves behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tritonfleet.agent.layout import Repo
from tritonfleet.agent.manifest import Entry, SyncError


def build(repo: Repo, files: dict[str, bytes]) -> str:
    """A committed version holding ``files``."""
    staging = repo.new_staging()
    for path, data in files.items():
        src = os.path.join(staging.parts, "x")
        with open(src, "wb") as f:
            f.write(data)
        staging.place(Entry(path=path, key=path, size=len(data), etag="e", md5="m", verified="md5"), src, link=False)
    staging.close()
    version = repo.commit(staging, staging.placed, "s3://b/p/", durable=True)
    repo.remove(os.path.basename(staging.root))
    return version


def test_commit_switch_and_prune(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        assert repo.current() is None and repo.complete() == []
        made = [build(repo, {"m/1/x": str(i).encode()}) for i in range(4)]
        assert [v.split("-")[0] for v in made] == ["000001", "000002", "000003", "000004"]
        assert repo.complete() == made and sorted(os.listdir(repo.versions)) == made  # no staging left
        repo.switch(made[1], durable=True)
        assert repo.current() == made[1] and os.readlink(tmp_path / "current") == f"versions/{made[1]}"
        assert repo.manifest(made[1])["m/1/x"].size == 1
        # keep 2: the current one (an old one here) and the newest other
        assert repo.prune(2) == [made[0], made[2]]
        assert repo.complete() == [made[1], made[3]]
        assert repo.prune(1) == [made[3]] and repo.complete() == [made[1]]
        assert not [n for n in os.listdir(repo.versions) if n.startswith(".")]


def test_a_second_sync_is_refused_while_one_runs(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        holder = subprocess.run([sys.executable, "-c", "import sys; from tritonfleet.agent.layout import Repo\n"
                                 "try:\n    Repo(sys.argv[1]).locked().__enter__()\nexcept Exception as e:\n"
                                 "    print(e)", str(tmp_path)], capture_output=True, text=True, timeout=30)
        assert "another sync holds" in holder.stdout
    with repo.locked():  # released
        pass


def test_current_must_be_a_symlink(tmp_path):
    (tmp_path / "current").mkdir()
    with pytest.raises(SyncError, match="is not a symlink"), Repo(str(tmp_path)).locked():
        pass


def test_dangling_or_foreign_current_is_no_version(tmp_path):
    repo = Repo(str(tmp_path))
    with repo.locked():
        os.symlink("versions/000009-20250101T000000Z", tmp_path / "current")
        assert repo.current() is None
        os.unlink(tmp_path / "current")
        os.symlink("/etc", tmp_path / "current")
        assert repo.current() is None


def test_leftovers_of_a_dead_run(tmp_path):
    """Trash and temporary links go at the next lock; a staging dir's journal says what it had checked."""
    repo = Repo(str(tmp_path))
    with repo.locked():
        staging = repo.new_staging()
        for path, data in {"a/x": b"12", "a/y": b"345", "b/z": b"6"}.items():
            src = os.path.join(staging.parts, "x")
            with open(src, "wb") as f:
                f.write(data)
            staging.place(Entry(path=path, key=path, size=len(data), etag="e"), src, link=False)
        staging.close()
        os.unlink(os.path.join(staging.tree, "a/y"))  # placed, then lost (say, a power cut before fsync)
        with open(staging.journal, "a") as f:
            f.write('{"path": "b/w", "key": "b/w", "si')  # a line cut short by the kill
        (tmp_path / "versions" / ".trash-000000-20250101T000000Z" / "m").mkdir(parents=True)
        os.symlink("versions/x", tmp_path / ".current.tmp-123")
    with repo.locked():
        (stale,) = repo.stale_staging()
        assert sorted(stale.journaled()) == ["a/x", "b/z"]
        assert sorted(os.listdir(tmp_path / "versions")) == [os.path.basename(staging.root)]
        assert not (tmp_path / ".current.tmp-123").is_symlink()
        assert repo.new_staging().id.startswith("000002-")  # after the stale one


@pytest.mark.parametrize("durable", [True, False])
def test_switch_renames_a_new_link_over_current_which_never_disappears(tmp_path, monkeypatch, durable):
    """Every file-system call of a switch is watched: none removes or recreates ``current``, and after each one
    ``current`` still points at a complete version; the new link is made under another name and renamed over
    ``current`` in one call (os.replace), so Triton never finds the repository missing."""
    repo = Repo(str(tmp_path))
    current = str(tmp_path / "current")
    seen: list[tuple[str, tuple]] = []
    real = {name: getattr(os, name) for name in ("unlink", "remove", "rmdir", "symlink", "rename", "replace")}

    def watch(name):
        def call(*args, **kwargs):
            paths = tuple(os.fspath(a) for a in args[:2])
            if name == "replace" and os.path.islink(paths[0]):  # what the link points at, before it moves
                paths += (os.readlink(paths[0]),)
            seen.append((name, paths))
            existed = os.path.lexists(current)
            result = real[name](*args, **kwargs)
            assert not existed or repo.current() is not None, f"current is gone after os.{name}{paths}"
            return result
        return call

    with repo.locked():
        made = [build(repo, {"m/1/x": str(i).encode()}) for i in range(3)]
        repo.switch(made[0], durable=True)
        for name in real:
            monkeypatch.setattr(os, name, watch(name))
        for version in (made[1], made[2], made[0]):
            seen.clear()
            repo.switch(version, durable=durable)
            assert repo.current() == version and os.readlink(current) == f"versions/{version}"
            assert not [c for c in seen if c[0] in ("unlink", "remove", "rmdir", "symlink") and current in c[1]]
            (tmp_link,) = [p[1] for n, p in seen if n == "symlink"]
            assert tmp_link != current and not os.path.lexists(tmp_link)  # moved away under its temporary name
            assert [c for c in seen if current in c[1]] == [("replace", (tmp_link, current, f"versions/{version}"))]


def test_switch_does_not_unlink_current_even_when_unlink_would_fail(tmp_path, monkeypatch):
    """A switch that needed to delete ``current`` first would fail here (and leave it missing on a crash)."""
    repo = Repo(str(tmp_path))
    with repo.locked():
        made = [build(repo, {"m/1/x": str(i).encode()}) for i in range(2)]
        repo.switch(made[0], durable=False)
        unlink, remove = os.unlink, os.remove

        def refuse(real):
            def call(path, *args, **kwargs):
                if os.path.abspath(os.fspath(path)) == str(tmp_path / "current"):
                    raise PermissionError(f"test: {path} must not be deleted")
                return real(path, *args, **kwargs)
            return call

        monkeypatch.setattr(os, "unlink", refuse(unlink))
        monkeypatch.setattr(os, "remove", refuse(remove))
        repo.switch(made[1], durable=False)
        assert repo.current() == made[1]
