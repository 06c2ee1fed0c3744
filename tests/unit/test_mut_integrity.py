"""Files that rot, in detail (from the mutation survivors of tritonfleet/agent/integrity.py): the stamps file
(where, what it holds, what it tolerates), each damage a check names and when it hashes, and when a file
may be reused. Plain files in tmp_path, no S3."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from tritonfleet.agent import integrity
from tritonfleet.agent.integrity import Damage, Stamps, check, reusable
from tritonfleet.agent.manifest import Entry


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _entry(path: str, data: bytes, md5: bool = True) -> Entry:
    return Entry(path=path, key=f"p/{path}", size=len(data), etag="e", md5=_md5(data) if md5 else "")


def _write(root, rel: str, data: bytes) -> str:
    full = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(data)
    return full


def _stamp_of(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns]


# --- Stamps -------------------------------------------------------------------------------------------------

def test_no_stamps_file_is_not_found_and_knows_nothing(tmp_path):
    s = Stamps(str(tmp_path))
    assert s.found is False
    assert s.known == {}
    assert s.path == str(tmp_path / ".verified.json")


def test_saved_stamps_are_the_files_size_mtime_and_ctime_by_inode_sorted_and_readable(tmp_path):
    a = _write(tmp_path, "a", b"aaa")
    b = _write(tmp_path, "d/b", b"bbbbbb")
    files = sorted([a, b], key=lambda p: os.stat(p).st_ino, reverse=True)  # not in the file's key order
    Stamps(str(tmp_path)).save(files)
    path = tmp_path / ".verified.json"
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    assert doc == {"inodes": {str(os.stat(p).st_ino): _stamp_of(p) for p in files}}
    assert text == json.dumps(doc, sort_keys=True)
    assert list(doc["inodes"]) == sorted(doc["inodes"])
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert not (tmp_path / ".verified.json.tmp").exists()
    again = Stamps(str(tmp_path))
    assert again.found is True
    assert again.known == {os.stat(p).st_ino: _stamp_of(p) for p in files}
    assert all(again.fresh(os.stat(p)) for p in files)


def test_save_skips_a_missing_file_and_still_stamps_the_ones_after_it(tmp_path):
    present = _write(tmp_path, "x", b"x")
    Stamps(str(tmp_path)).save([str(tmp_path / "gone"), present])
    assert Stamps(str(tmp_path)).known == {os.stat(present).st_ino: _stamp_of(present)}


def test_save_replaces_what_was_stamped_before(tmp_path):
    a = _write(tmp_path, "a", b"a")
    b = _write(tmp_path, "b", b"b")
    Stamps(str(tmp_path)).save([a])
    Stamps(str(tmp_path)).save([b])
    assert set(Stamps(str(tmp_path)).known) == {os.stat(b).st_ino}


def test_fresh_is_false_once_size_mtime_or_ctime_differ(tmp_path):
    a = _write(tmp_path, "a", b"abc")
    s = Stamps(str(tmp_path))
    s.save([a])
    s = Stamps(str(tmp_path))
    st = os.stat(a)
    assert s.fresh(st)
    ino, (size, mtime, ctime) = st.st_ino, _stamp_of(a)
    for other in ([size + 1, mtime, ctime], [size, mtime + 1, ctime], [size, mtime, ctime + 1],
                  [mtime, size, ctime], [size, ctime, mtime]):
        if other == [size, mtime, ctime]:
            continue
        s.known = {ino: other}
        assert not s.fresh(st), other
    s.known = {}
    assert not s.fresh(st)


def test_fresh_after_a_write_that_keeps_the_size(tmp_path):
    a = _write(tmp_path, "a", b"abc")
    s = Stamps(str(tmp_path))
    s.save([a])
    st = os.stat(a)
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    assert not Stamps(str(tmp_path)).fresh(os.stat(a))


@pytest.mark.parametrize("body", ["not json", "[1, 2]", '{"inodes": {"x": [1, 2, 3]}}', '{"inodes": 5}',
                                  '{"inodes": [1]}', '"text"'])
def test_a_stamps_file_that_cannot_be_read_counts_as_none(tmp_path, body):
    (tmp_path / ".verified.json").write_text(body)
    s = Stamps(str(tmp_path))
    assert s.found is False
    assert s.known == {}


def test_a_stamps_file_without_inodes_is_found_and_empty(tmp_path):
    (tmp_path / ".verified.json").write_text("{}")
    s = Stamps(str(tmp_path))
    assert s.found is True
    assert s.known == {}


def test_stamps_that_are_not_lists_are_dropped(tmp_path):
    (tmp_path / ".verified.json").write_text(json.dumps({"inodes": {"7": [1, 2, 3], "8": "x", "9": {"a": 1}}}))
    s = Stamps(str(tmp_path))
    assert s.found is True
    assert s.known == {7: [1, 2, 3]}


def test_a_stamps_file_with_non_ascii_text_is_read_as_utf8(tmp_path):
    (tmp_path / ".verified.json").write_bytes(json.dumps({"inodes": {"7": [1, 2, 3]}, "note": "ü€"},
                                                          ensure_ascii=False).encode("utf-8"))
    s = Stamps(str(tmp_path))
    assert s.found is True
    assert s.known == {7: [1, 2, 3]}


# --- Damage and check ---------------------------------------------------------------------------------------

def test_damage_is_true_only_with_damaged_files():
    assert not Damage()
    assert not Damage(hashed=3)
    assert Damage(files={"a": "missing"})
    assert Damage().files == {} and Damage().hashed == 0


def _repo(tmp_path):
    """Three good files; entries for them."""
    data = {"a/one": b"1111", "b/two": b"22", "c/three": b"333333"}
    for rel, body in data.items():
        _write(tmp_path, rel, body)
    return {rel: _entry(rel, body) for rel, body in data.items()}


def test_check_names_every_damage_and_goes_on_after_each(tmp_path):
    entries = _repo(tmp_path)
    entries["0missing"] = _entry("0missing", b"zz")
    entries["1file/below"] = _entry("1file/below", b"zz")
    _write(tmp_path, "1file", b"it is a file")
    _write(tmp_path, "2size", b"abc")
    entries["2size"] = _entry("2size", b"abcdef")
    _write(tmp_path, "3content", b"abc")
    entries["3content"] = _entry("3content", b"abd")
    stamps = Stamps(str(tmp_path))
    out = check(str(tmp_path), entries, stamps, "all")
    assert out.files == {
        "0missing": "missing",
        "1file/below": "unreadable (Not a directory)",
        "2size": "size 3, expected 6",
        "3content": f"content changed (md5 {_md5(b'abc')}, expected {_md5(b'abd')})",
    }
    assert out.hashed == 4  # the 3 good ones and 3content
    assert out


def test_check_of_an_intact_version_hashes_each_file_once(tmp_path):
    entries = _repo(tmp_path)
    out = check(str(tmp_path), entries, Stamps(str(tmp_path)), "all")
    assert out.files == {}
    assert out.hashed == 3
    assert not out


def test_stat_mode_finds_missing_and_size_but_hashes_nothing(tmp_path):
    entries = _repo(tmp_path)
    _write(tmp_path, "a/one", b"9999")  # same size, other content
    out = check(str(tmp_path), entries, Stamps(str(tmp_path)), "stat")
    assert out.files == {}
    assert out.hashed == 0
    os.remove(tmp_path / "b/two")
    assert check(str(tmp_path), entries, Stamps(str(tmp_path)), "stat").files == {"b/two": "missing"}


def test_changed_mode_hashes_only_files_whose_inode_changed_since_stamped(tmp_path):
    entries = _repo(tmp_path)
    Stamps(str(tmp_path)).save([str(tmp_path / p) for p in entries])
    stamps = Stamps(str(tmp_path))
    out = check(str(tmp_path), entries, stamps, "changed")
    assert (out.files, out.hashed) == ({}, 0)
    _write(tmp_path, "b/two", b"99")  # same size, new content, new mtime/ctime
    out = check(str(tmp_path), entries, Stamps(str(tmp_path)), "changed")
    assert out.hashed == 1
    assert out.files == {"b/two": f"content changed (md5 {_md5(b'99')}, expected {_md5(b'22')})"}


def test_changed_mode_hashes_everything_without_stamps(tmp_path):
    entries = _repo(tmp_path)
    stamps = Stamps(str(tmp_path))
    assert not stamps.found
    assert check(str(tmp_path), entries, stamps, "changed").hashed == 3


def test_changed_mode_does_not_trust_stamps_known_without_a_stamps_file(tmp_path):
    entries = _repo(tmp_path)
    stamps = Stamps(str(tmp_path))
    stamps.known = {os.stat(tmp_path / p).st_ino: _stamp_of(str(tmp_path / p)) for p in entries}
    assert not stamps.found
    assert check(str(tmp_path), entries, stamps, "changed").hashed == 3


def test_all_mode_hashes_even_fresh_files_and_finds_rot_the_stamps_miss(tmp_path):
    entries = _repo(tmp_path)
    Stamps(str(tmp_path)).save([str(tmp_path / p) for p in entries])
    stamps = Stamps(str(tmp_path))
    entries["a/one"] = _entry("a/one", b"1112")  # the manifest disagrees, the stamp is fresh
    assert check(str(tmp_path), entries, stamps, "changed").files == {}
    out = check(str(tmp_path), entries, stamps, "all")
    assert out.hashed == 3
    assert set(out.files) == {"a/one"}


def test_an_entry_without_md5_is_never_hashed(tmp_path):
    _write(tmp_path, "f", b"abc")
    out = check(str(tmp_path), {"f": _entry("f", b"xyz", md5=False)}, Stamps(str(tmp_path)), "all")
    assert (out.files, out.hashed) == ({}, 0)


@pytest.mark.parametrize("exc, said", [(OSError(5, "Input/output error"), "unreadable (Input/output error)"),
                                       (OSError("boom"), "unreadable (boom)")])
def test_a_file_that_cannot_be_read_while_hashing_is_unreadable(tmp_path, monkeypatch, exc, said):
    _write(tmp_path, "f", b"abc")
    _write(tmp_path, "g", b"abc")

    def fail(path, *a):
        if path.endswith("f"):
            raise exc
        return _md5(b"abc"), _md5(b"abc")

    monkeypatch.setattr(integrity, "hash_file", fail)
    out = check(str(tmp_path), {"f": _entry("f", b"abc"), "g": _entry("g", b"abc")}, Stamps(str(tmp_path)), "all")
    assert out.files == {"f": said}
    assert out.hashed == 1


# --- reusable -----------------------------------------------------------------------------------------------

def test_reusable_needs_the_file_and_its_size(tmp_path):
    stamps = Stamps(str(tmp_path))
    assert reusable(str(tmp_path / "none"), _entry("none", b"x"), stamps) is False
    p = _write(tmp_path, "f", b"abc")
    assert reusable(p, _entry("f", b"abcd"), stamps) is False
    assert reusable(p, _entry("f", b"abcd", md5=False), stamps) is False


def test_reusable_hashes_an_unstamped_file(tmp_path):
    p = _write(tmp_path, "f", b"abc")
    stamps = Stamps(str(tmp_path))
    assert reusable(p, _entry("f", b"abc"), stamps) is True
    assert reusable(p, _entry("f", b"abd"), stamps) is False
    assert reusable(p, _entry("f", b"abd", md5=False), stamps) is True


def test_reusable_trusts_a_fresh_stamp_without_hashing(tmp_path, monkeypatch):
    p = _write(tmp_path, "f", b"abc")
    Stamps(str(tmp_path)).save([p])
    stamps = Stamps(str(tmp_path))

    def never(*a):
        raise AssertionError("hashed")

    monkeypatch.setattr(integrity, "hash_file", never)
    assert reusable(p, _entry("f", b"abd"), stamps) is True


def test_reusable_is_false_when_hashing_fails(tmp_path, monkeypatch):
    p = _write(tmp_path, "f", b"abc")

    def fail(*a):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(integrity, "hash_file", fail)
    assert reusable(p, _entry("f", b"abc"), Stamps(str(tmp_path))) is False
