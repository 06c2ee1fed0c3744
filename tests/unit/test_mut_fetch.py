"""Tests for what mutation testing of tritonfleet/agent/fetch.py found unchecked (docs/mutation-survivors.md):
the sizes and lines of the space check and of a full disk, a HeadObject without an ETag, the phase a
HeadObject reports, and a multipart download whose exact part sizes do not give its ETag."""

from __future__ import annotations

import errno
import hashlib
import types

import pytest

from tests.unit.test_agent_sync import bucket, endpoint, s3  # noqa: F401 (fixtures)
from tritonfleet.agent import fetch
from tritonfleet.agent.fetch import SPACE_MARGIN, MiB, _check_space, _Fetcher, _no_space, _size
from tritonfleet.agent.manifest import Entry, SyncError
from tritonfleet.agent.remote import Phase
from tritonfleet.agent.sync import Options


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1, "1 B"), (1023, "1023 B"), (1024, "1.0 KiB"),
                                     (1536, "1.5 KiB"), (MiB - 1, "1024.0 KiB"), (MiB, "1.0 MiB"),
                                     (5 * MiB + MiB // 2, "5.5 MiB"), (1024 * MiB, "1.0 GiB"),
                                     (3 * 1024 * 1024 * MiB, "3072.0 GiB"), (2.5, "2 B")])
def test_sizes_read_as_people_write_them(n, text):
    assert _size(n) == text


def test_the_space_check_passes_at_exactly_enough_and_names_everything_when_short(monkeypatch, tmp_path):
    monkeypatch.setattr(fetch, "free_space", lambda path: 100 * MiB + SPACE_MARGIN)
    _check_space(str(tmp_path), 100 * MiB, 3)  # exactly enough: no error
    with pytest.raises(SyncError) as err:
        _check_space(str(tmp_path), 100 * MiB + 1, 3)
    assert str(err.value) == (f"not enough space on the filesystem of {tmp_path}: this sync downloads 100.0 MiB "
                              "(3 files) and needs 164.0 MiB free, 164.0 MiB are; free space there, or keep fewer "
                              "versions (--keep, models_s3_keep)")


def _full(filename: str | None = None) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", filename) if filename else \
        OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_one_line_with_the_path_and_the_space_left(monkeypatch):
    monkeypatch.setattr(fetch, "free_space", lambda path: 2 * MiB)
    assert _no_space(_full("/srv/m/versions/.staging-1/parts/3"), "/srv/m") == (
        "no space left on the filesystem of /srv/m writing /srv/m/versions/.staging-1/parts/3; 2.0 MiB free now; "
        "free space there and run again")
    assert _no_space(_full(), "/srv/m") == ("no space left on the filesystem of /srv/m; 2.0 MiB free now; free "
                                            "space there and run again")


def test_a_full_disk_whose_free_space_cannot_be_read_still_makes_the_line(monkeypatch):
    def gone(path):
        raise FileNotFoundError(path)
    monkeypatch.setattr(fetch, "free_space", gone)
    assert _no_space(_full(), "/srv/m") == "no space left on the filesystem of /srv/m; free space there and run again"


def _chain(depth: int) -> BaseException:
    """An exception whose cause's cause ... (``depth`` links in all) is the full disk."""
    exc: BaseException = _full()
    for i in range(depth - 1):
        outer = RuntimeError(f"wrapped {i}")
        outer.__cause__ = exc
        exc = outer
    return exc


def test_a_full_disk_is_found_up_to_six_causes_deep(monkeypatch):
    monkeypatch.setattr(fetch, "free_space", lambda path: 0)
    assert _no_space(_chain(6), "/d") is not None
    assert _no_space(_chain(7), "/d") is None  # a bound, not a search: deeper is some other failure
    assert _no_space(RuntimeError("other"), "/d") is None


class _Heads:
    def __init__(self, **head) -> None:
        self.head, self.calls, self.phases = head, [], []

    def head_object(self, **kwargs):
        self.calls.append(kwargs)
        self.phases.append(self.phase.what)
        return self.head


def _fetcher(tmp_path, client) -> _Fetcher:
    phase = Phase()
    client.phase = phase
    return _Fetcher(Options(bucket="b", prefix="", dest=str(tmp_path)), types.SimpleNamespace(client=client, phase=phase),
                    None, None, None)


def test_a_head_without_an_etag_means_the_object_changed(tmp_path):
    """Some stores leave the ETag out of a HeadObject; the object cannot be shown unchanged: fail, do not crash."""
    (tmp_path / "f").write_bytes(b"abc")
    client = _Heads(ContentLength=3)
    with pytest.raises(SyncError, match="s3://b/k changed in S3 while syncing"):
        _fetcher(tmp_path, client)._check(str(tmp_path / "f"), Entry(path="f", key="k", size=3, etag="0" * 32))


def test_a_head_says_what_the_sync_is_doing(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    client = _Heads(ETag='"' + "0" * 32 + '"', ContentLength=3)
    _fetcher(tmp_path, client)._check(str(tmp_path / "f"), Entry(path="f", key="k", size=3, etag="0" * 32))
    assert client.phases == ["reading the metadata of s3://b/k (HeadObject)"]


def test_parts_of_several_sizes_that_do_not_give_the_etag_are_a_mismatch(tmp_path):
    """A multipart object with parts of 5, 3 and 2 bytes (not uniform): the exact sizes from HeadObject are
    tried, and a download whose bytes do not give the ETag with them is refused, not taken."""
    good = b"abcdefghij"
    parts = [good[:5], good[5:8], good[8:]]
    etag = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
    (tmp_path / "f").write_bytes(b"abcdefghiX")  # one byte wrong

    class Parts(_Heads):
        def head_object(self, **kwargs):
            super().head_object(**kwargs)
            sizes = {1: 5, 2: 3, 3: 2}
            return {**self.head, "ContentLength": sizes[kwargs["PartNumber"]]} if "PartNumber" in kwargs else self.head

    client = Parts(ETag=f'"{etag}"', ContentLength=10)
    result = _fetcher(tmp_path, client)._check(str(tmp_path / "f"), Entry(path="f", key="k", size=10, etag=etag))
    assert isinstance(result, str) and result.startswith(f"content does not match the ETag {etag}")
    (tmp_path / "f").write_bytes(good)  # and the right bytes pass with the exact sizes
    client = Parts(ETag=f'"{etag}"', ContentLength=10)
    result = _fetcher(tmp_path, client)._check(str(tmp_path / "f"), Entry(path="f", key="k", size=10, etag=etag))
    assert result == (hashlib.md5(good).hexdigest(), "multipart-md5")


def test_uniform_parts_that_are_no_whole_mib_are_found_from_part_1(tmp_path):
    """Parts of 5, 5 and 2 bytes: no MiB guess fits, so part 1's size (HeadObject PartNumber=1) gives the
    uniform split, and the download is verified with it (not refused for want of a guess)."""
    data = b"abcdefghijkl"
    parts = [data[:5], data[5:10], data[10:]]
    etag = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
    (tmp_path / "f").write_bytes(data)

    class Parts(_Heads):
        def head_object(self, **kwargs):
            super().head_object(**kwargs)
            return {**self.head, "ContentLength": 5} if kwargs.get("PartNumber") == 1 else self.head

    client = Parts(ETag=f'"{etag}"', ContentLength=12)
    result = _fetcher(tmp_path, client)._check(str(tmp_path / "f"), Entry(path="f", key="k", size=12, etag=etag))
    assert result == (hashlib.md5(data).hexdigest(), "multipart-md5")
    assert client.calls == [{"Bucket": "b", "Key": "k", "PartNumber": 1}]  # one head, for part 1 only


def test_downloads_run_on_the_pool_the_options_ask_for(endpoint, s3, bucket, tmp_path, monkeypatch):  # noqa: F811
    """--concurrency 2: at most two groups are fetched at once, on the pool's own (named) threads, and
    s3transfer gets the same concurrency and the ranged-GET size as its threshold and chunk."""
    import threading
    import time

    from s3transfer import manager as s3manager

    from tests.unit.test_agent_sync import set_remote
    from tritonfleet.agent import sync
    from tritonfleet.agent.fetch import range_size

    tree = {f"m/1/f{i}.bin": bytes([i]) * (1000 + i) for i in range(6)}
    set_remote(s3, bucket, "repo", tree)
    seen, inside, most, lock = [], [0], [0], threading.Lock()
    group = _Fetcher._group

    def counted(self, manager, entries):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            seen.append(threading.current_thread().name)
        time.sleep(0.1)  # long enough for the others to start, if they may
        try:
            return group(self, manager, entries)
        finally:
            with lock:
                inside[0] -= 1
    monkeypatch.setattr(_Fetcher, "_group", counted)
    configs = []
    init = s3manager.TransferManager.__init__

    def record(self, client, config=None, *args, **kwargs):
        configs.append(config)
        return init(self, client, config, *args, **kwargs)
    monkeypatch.setattr(s3manager.TransferManager, "__init__", record)
    opts = sync.Options(bucket=bucket, prefix="repo/", dest=str(tmp_path / "d"), endpoint_url=endpoint,
                        concurrency=2)
    result = sync.run(opts)
    assert result.status == "synced" and result.downloaded == 6, result.error
    assert most[0] == 2 and all(name.startswith("tf-fetch") for name in seen), (most, seen)
    (config,) = configs
    chunk = range_size(max(len(b) for b in tree.values()))
    assert (config.max_request_concurrency, config.multipart_threshold, config.multipart_chunksize) == (2, chunk, chunk)


class _ChecksumsNeverMatch:
    """s3transfer's manager as it ends when botocore's own check of S3's checksum fails on every download."""

    def __init__(self) -> None:
        self.calls = 0

    def download(self, bucket_name, key, path, subscribers):
        from botocore.exceptions import FlexibleChecksumError

        self.calls += 1
        raise FlexibleChecksumError(error_msg=f"Expected checksum AAAA did not match calculated checksum: B{self.calls}")


def _downloader(tmp_path, retries: int = 3) -> _Fetcher:
    from tritonfleet.agent.sync import Result

    remote = types.SimpleNamespace(phase=Phase())
    return _Fetcher(Options(bucket="b", prefix="", dest=str(tmp_path), retries=retries), remote,
                    types.SimpleNamespace(parts=str(tmp_path)), None, Result())


def test_a_download_whose_s3_checksum_never_matches_is_tried_every_attempt_and_named(tmp_path):
    """botocore's FlexibleChecksumError is a failed check like ours: downloaded again up to --retries times, each
    a retry counted, and the error names the checksum problem of the last attempt."""
    fetcher, manager = _downloader(tmp_path), _ChecksumsNeverMatch()
    with pytest.raises(SyncError) as err:
        fetcher._fetch(manager, Entry(path="m/1/model.pt", key="p/m/1/model.pt", size=10, etag="0" * 32))
    assert manager.calls == 3 and fetcher.result.retries == 2
    assert str(err.value) == ("s3://b/p/m/1/model.pt: Expected checksum AAAA did not match calculated checksum: B3 "
                              "(after 3 download attempts)")


def test_a_download_after_another_failed_is_cancelled_before_it_asks_s3(tmp_path):
    fetcher, manager = _downloader(tmp_path), _ChecksumsNeverMatch()
    fetcher.failed.set()
    with pytest.raises(SyncError, match="^cancelled$"):
        fetcher._fetch(manager, Entry(path="a", key="a", size=10, etag="0" * 32))
    assert manager.calls == 0
