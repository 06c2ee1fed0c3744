"""The agent's manifest: the diff per file and per model, S3 keys as repository paths, the source URL and
the manifest file itself."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tritonfleet.agent.manifest import (
    MANIFEST_NAME,
    Entry,
    SyncError,
    check_paths,
    diff,
    key_to_path,
    model_changes,
    read_manifest,
    write_manifest,
)
from tritonfleet.agent.sync import parse_source


def entries(**files: tuple[str, int]) -> dict[str, Entry]:
    """{path: Entry} from path=(etag, size); "__" in a keyword stands for "/"."""
    out = {}
    for name, (etag, size) in files.items():
        path = name.replace("__", "/")
        out[path] = Entry(path=path, key="p/" + path, size=size, etag=etag)
    return out


def test_diff_by_etag_and_size():
    old = entries(a__1__x=("e1", 1), a__1__y=("e2", 2), b__1__z=("e3", 3), c__cfg=("e4", 4))
    new = entries(a__1__x=("e1", 1), a__1__y=("e2", 5), b__1__z=("e9", 3), d__1__w=("e5", 5))
    d = diff(old, new)
    assert (d.added, d.changed, d.removed, d.unchanged) == (["d/1/w"], ["a/1/y", "b/1/z"], ["c/cfg"], ["a/1/x"])
    assert not d.empty
    assert model_changes(old, new, d) == {"added": ["d"], "changed": ["a", "b"], "removed": ["c"]}


def test_diff_ignores_what_is_not_content():
    old = entries(a__x=("e1", 1))
    new = {"a/x": Entry(path="a/x", key="other-prefix/a/x", size=1, etag="e1", md5="m", verified="md5")}
    assert diff(old, new).empty and diff(new, old).empty


def test_model_changes():
    old = entries(m__1__a=("1", 1), m__1__b=("2", 1), top=("3", 1), gone__x=("4", 1))
    new = entries(m__1__a=("1", 1), top=("9", 1), fresh__x=("5", 1))
    d = diff(old, new)
    # m lost a file (changed), a top-level file is no model, gone and fresh are whole models
    assert model_changes(old, new, d) == {"added": ["fresh"], "changed": ["m"], "removed": ["gone"]}
    assert model_changes(old, old, diff(old, old)) == {"added": [], "changed": [], "removed": []}


_trees = st.dictionaries(st.sampled_from(["a/1/x", "a/1/y", "b/z", "c", "d/1/2/w"]),
                         st.tuples(st.sampled_from(["e1", "e2"]), st.integers(0, 2)))


@given(_trees, _trees)
def test_diff_partitions_both_trees(old_raw, new_raw):
    old = {p: Entry(path=p, key=p, size=s, etag=e) for p, (e, s) in old_raw.items()}
    new = {p: Entry(path=p, key=p, size=s, etag=e) for p, (e, s) in new_raw.items()}
    d = diff(old, new)
    assert sorted(d.added + d.changed + d.unchanged) == sorted(new)
    assert sorted(d.removed + d.changed + d.unchanged) == sorted(old)
    assert d.empty == (old_raw == new_raw)
    m = model_changes(old, new, d)
    assert not set(m["added"]) & set(m["changed"]) and not set(m["removed"]) & set(m["changed"])


@pytest.mark.parametrize("key, prefix, path", [
    ("repo/m/1/model.pt", "repo/", "m/1/model.pt"),
    ("m/config.pbtxt", "", "m/config.pbtxt"),
    ("repo/m/", "repo/", None),  # a "folder" marker
    ("repo/", "repo/", None),
    ("repo/.hidden/x", "repo/", ".hidden/x"),
    ("repo/m/..x", "repo/", "m/..x"),
])
def test_key_to_path(key, prefix, path):
    assert key_to_path(key, prefix) == path


@pytest.mark.parametrize("key, message", [
    ("repo/m//x", "cannot be a file path"),
    ("repo/../x", "cannot be a file path"),
    ("repo/m/./x", "cannot be a file path"),
    ("repo/m/x\0", "cannot be a file path"),
    ("repo/" + "n" * 256, "cannot be a file path"),
    ("repo/" + MANIFEST_NAME, "collides"),
    ("other/x", "not below the prefix"),
])
def test_key_to_path_refuses(key, message):
    with pytest.raises(SyncError, match=message):
        key_to_path(key, "repo/")


def test_check_paths():
    check_paths({"a/1/x", "a/1/y", "b"})
    with pytest.raises(SyncError, match="'a/1' is both a file and a directory"):
        check_paths({"a/1", "a/1/x"})


@pytest.mark.parametrize("url, parsed", [
    ("s3://models/prod", ("models", "prod/")),
    ("s3://models/prod/", ("models", "prod/")),
    ("s3://models", ("models", "")),
    ("s3://models/", ("models", "")),
    ("s3://my.bucket-1/a/b", ("my.bucket-1", "a/b/")),
])
def test_parse_source(url, parsed):
    assert parse_source(url) == parsed


@pytest.mark.parametrize("url", ["models/prod", "s3:/models", "s3://Models/x", "s3://ab/x", "s3://a..b/x",
                                 "s3://-bucket/x", "s3://bucket/x\ny", "s3://bucket/x\n", "https://bucket.s3.amazonaws.com/x"])
def test_parse_source_refuses(url):
    with pytest.raises(ValueError):
        parse_source(url)


def test_manifest_round_trip_and_malformed(tmp_path):
    files = {"a/x": Entry(path="a/x", key="p/a/x", size=3, etag="e-2", md5="m", verified="multipart-md5")}
    path = str(tmp_path / MANIFEST_NAME)
    write_manifest(path, "000001-20250101T000000Z", "s3://b/p/", "2025-01-01T00:00:00Z", files)
    assert read_manifest(path) == files
    doc = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert (doc["format"], doc["version"], doc["source"]) == (1, "000001-20250101T000000Z", "s3://b/p/")
    assert not list(tmp_path.glob("*.tmp"))
    for bad in ('{"format": 2, "files": []}', '{"format": 1, "files": [{"path": "x"}]}', "[]",
                '{"format": 1, "files": [{"path": "x", "key": "x", "size": "1", "etag": "e"}]}'):
        (tmp_path / MANIFEST_NAME).write_text(bad)
        with pytest.raises(ValueError):
            read_manifest(path)
