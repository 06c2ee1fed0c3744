"""Downloads for ``tritonfleet-agent sync``: the space check, the ranged GETs through s3transfer, and the check
of every download against its ETag or checksum before it is placed in the staging tree.

s3transfer is imported only when something is downloaded (an agent that finds nothing new never loads it).
"""

from __future__ import annotations

import errno
import os
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from typing import TYPE_CHECKING

from . import verify
from .layout import Staging
from .manifest import Entry, SyncError
from .remote import Remote

if TYPE_CHECKING:
    from .sync import Options, Progress, Result

MiB = 1024 * 1024
PART_SIZE = 8 * MiB  # the smallest range of a ranged GET
MAX_PART_SIZE = 64 * MiB


def range_size(largest: int) -> int:
    """Size of the ranged GETs (and the threshold for them): an eighth of the largest object, whole MiB,
    8 to 64 MiB. Fewer, larger ranges cost fewer requests; eight in flight still fill the link."""
    return min(MAX_PART_SIZE, max(PART_SIZE, -(-largest // 8 // MiB) * MiB))


SPACE_MARGIN = 64 * MiB  # left free besides the downloads (manifest, journal, the filesystem's own needs)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def free_space(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _check_space(root: str, need: int, files: int) -> None:
    """Refuse a download the filesystem cannot hold, before anything is fetched."""
    free = free_space(root)
    if need + SPACE_MARGIN > free:
        raise SyncError(f"not enough space on the filesystem of {root}: this sync downloads {_size(need)} "
                        f"({files} files) and needs {_size(need + SPACE_MARGIN)} free, {_size(free)} are; free "
                        "space there, or keep fewer versions (--keep, models_s3_keep)")


def _no_space(exc: BaseException, dest: str) -> str | None:
    """The one line for a full disk met anyway (another writer filled it): the path and the space left."""
    cause: BaseException | None = exc
    for _ in range(6):
        if cause is None:
            return None
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            where = f" writing {cause.filename}" if cause.filename else ""
            try:
                left = f"; {_size(free_space(dest))} free now"
            except OSError:
                left = ""
            return f"no space left on the filesystem of {dest}{where}{left}; free space there and run again"
        cause = cause.__cause__ or cause.__context__
    return None


def _subscriber(entry: Entry, progress: Progress):
    """An s3transfer subscriber that hands over the listed size and ETag (no HeadObject, If-Match on ranged
    GETs) and reports progress (s3transfer is imported only when something is downloaded)."""
    from s3transfer.subscribers import BaseSubscriber

    class Subscriber(BaseSubscriber):
        def on_queued(self, future, **kwargs) -> None:
            future.meta.provide_transfer_size(entry.size)
            if hasattr(future.meta, "provide_object_etag"):  # s3transfer >= 0.11
                future.meta.provide_object_etag(f'"{entry.etag}"')

        def on_progress(self, future, bytes_transferred: int, **kwargs) -> None:
            progress.advance(bytes_transferred)

    return Subscriber()


class _Fetcher:
    """Downloads groups of entries with the same content (one GET per group, links for the rest) in
    parallel, checks each download and places it in the staging tree."""

    def __init__(self, opts: Options, remote: Remote, staging: Staging, progress: Progress,
                 result: Result) -> None:
        self.opts = opts
        self.remote = remote
        self.staging = staging
        self.progress = progress
        self.result = result
        self.failed = threading.Event()
        self._lock = threading.Lock()
        self._n = 0
        self._heads: dict[str, dict] = {}
        self._first_part: dict[str, int] = {}
        self._all_parts: dict[str, list[int] | None] = {}

    def run(self, groups: list[list[Entry]]) -> None:
        from s3transfer.manager import TransferConfig, TransferManager

        chunk = range_size(max(g[0].size for g in groups))
        config = TransferConfig(max_request_concurrency=self.opts.concurrency, multipart_threshold=chunk,
                                multipart_chunksize=chunk)
        pool = ThreadPoolExecutor(max_workers=self.opts.concurrency, thread_name_prefix="tf-fetch")
        try:
            # leaving the manager on an exception cancels the transfers in flight (its shutdown(cancel=True)
            # is broken in some s3transfer versions), then the pool's workers end
            with TransferManager(self.remote.client, config) as manager:
                try:
                    for future in as_completed([pool.submit(self._group, manager, g) for g in groups]):
                        future.result()
                except BaseException:
                    self.failed.set()
                    raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _group(self, manager, group: list[Entry]) -> None:
        if self.failed.is_set():
            return
        first = self._fetch(manager, group[0])
        for other in group[1:]:
            self.staging.place(replace(other, md5=first.md5, verified=first.verified),
                               os.path.join(self.staging.tree, first.path), link=True)
            with self._lock:
                self.result.linked += 1

    def _fetch(self, manager, entry: Entry) -> Entry:
        from botocore.exceptions import FlexibleChecksumError

        with self._lock:
            self._n += 1
            tmp = os.path.join(self.staging.parts, str(self._n))
        problem = ""
        for attempt in range(self.opts.retries):
            if self.failed.is_set():
                raise SyncError("cancelled")
            if attempt:
                with self._lock:
                    self.result.retries += 1
            self.remote.phase(f"downloading s3://{self.opts.bucket}/{entry.key}")
            if entry.size == 0 and entry.etag.lower() == verify.EMPTY_MD5:
                open(tmp, "wb").close()  # nothing to fetch
            else:
                try:
                    manager.download(self.opts.bucket, entry.key, tmp,
                                     subscribers=[_subscriber(entry, self.progress)]).result()
                except FlexibleChecksumError as exc:  # botocore's own check of an S3 checksum
                    problem = str(exc)
                    continue
            checked = self._check(tmp, entry)
            if isinstance(checked, str):
                problem = checked
                continue
            md5, how = checked
            os.chmod(tmp, 0o644)  # flushed with the whole tree (syncfs) before the commit
            placed = replace(entry, md5=md5, verified=how)
            self.staging.place(placed, tmp, link=False)
            with self._lock:
                self.result.downloaded += 1
                self.result.bytes += entry.size
                if how == "size":
                    self.result.unverified.append(entry.path)
            self.progress.file_done()
            return placed
        raise SyncError(f"s3://{self.opts.bucket}/{entry.key}: {problem} "
                        f"(after {self.opts.retries} download attempts)")

    def _check(self, path: str, entry: Entry) -> tuple[str, str] | str:
        """(local md5, how it was checked), or what is wrong with the download."""
        size = os.stat(path).st_size
        if size != entry.size:
            return f"downloaded {size} bytes, expected {entry.size}"
        etag = entry.etag.lower()
        parts = verify.etag_parts(etag)
        # multipart: first the part size SDKs use (whole MiB, the smallest giving N parts), which needs no
        # HeadObject; then the size of part 1 as S3 reports it
        guess = verify.guess_parts(entry.size, parts) if parts else None
        md5, got = verify.hash_file(path, guess or (self._uniform_parts(entry, parts) if parts else None))
        if parts is not None and got == etag:
            return md5, "multipart-md5" if parts else "md5"
        if guess and parts:
            sizes = self._uniform_parts(entry, parts)
            if sizes and sizes != guess:
                md5, got = verify.hash_file(path, sizes)
                if got == etag:
                    return md5, "multipart-md5"
        # No match: a corrupt download, parts of several sizes, or an ETag that is no md5 at all
        head = self._head(entry.key)
        if head.get("ETag", "").strip('"') != entry.etag:
            raise SyncError(f"s3://{self.opts.bucket}/{entry.key} changed in S3 while syncing; run the sync again")
        etag_is_md5 = head.get("ServerSideEncryption") not in ("aws:kms", "aws:kms:dsse") and \
            not head.get("SSECustomerAlgorithm")
        if parts is not None and etag_is_md5:
            exact = self._exact_parts(entry, parts) if parts else None
            if exact and verify.hash_file(path, exact)[1] == etag:
                return md5, "multipart-md5"
            return f"content does not match the ETag {entry.etag} (got {got})"
        checksum = verify.full_object_checksum(head)
        if checksum is None:
            return md5, "size"
        if verify.checksum_matches(path, *checksum):
            return md5, checksum[0]
        return f"content does not match the object's {checksum[0]} checksum"

    def _head(self, key: str, part: int | None = None) -> dict:
        self.remote.phase(f"reading the metadata of s3://{self.opts.bucket}/{key} (HeadObject)")
        if part:
            return self.remote.client.head_object(Bucket=self.opts.bucket, Key=key, PartNumber=part)
        if key not in self._heads:
            self._heads[key] = self.remote.client.head_object(Bucket=self.opts.bucket, Key=key,
                                                              ChecksumMode="ENABLED")
        return self._heads[key]

    def _uniform_parts(self, entry: Entry, count: int) -> list[int] | None:
        """Part sizes as SDKs upload: all the size of part 1 (HeadObject PartNumber=1) but the last."""
        if entry.key not in self._first_part:
            self._first_part[entry.key] = self._head(entry.key, part=1)["ContentLength"]
        return verify.uniform_parts(entry.size, self._first_part[entry.key], count)

    def _exact_parts(self, entry: Entry, count: int) -> list[int] | None:
        """Every part's size (a HeadObject each, once), when they differ from the uniform guess."""
        if entry.key not in self._all_parts:
            sizes = [self._first_part[entry.key]] + [self._head(entry.key, part=i)["ContentLength"]
                                                      for i in range(2, count + 1)]
            ok = sum(sizes) == entry.size and sizes != self._uniform_parts(entry, count)
            self._all_parts[entry.key] = sizes if ok else None
        return self._all_parts[entry.key]
