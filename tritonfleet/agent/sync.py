"""``tritonfleet-agent sync``: mirror a Triton model repository kept in S3 into a directory on the host.

Usage::

    tritonfleet-agent sync --source s3://BUCKET/PREFIX --dest /srv/models [--json]

Every object below ``s3://BUCKET/PREFIX/`` becomes a file at its key's path below the prefix, so
``s3://models/prod/resnet50/1/model.pt`` with ``--source s3://models/prod`` is ``resnet50/1/model.pt``.
Keys ending in ``/`` ("folder" markers) are skipped; a key that cannot be a file path (an empty, ``.`` or
``..`` component, a path that is both a file and a directory) fails the sync.

Layout on the host (point Triton's ``--model-repository`` at ``DIR/current``)::

    DIR/current -> versions/<id>                  the version in service (a relative symlink)
    DIR/versions/<id>/...                         one complete copy of the repository per sync
    DIR/versions/<id>/.tritonfleet-manifest.json  path, S3 key, size, ETag, local md5, how it was checked
    DIR/versions/.staging-<id>/                   a sync in progress (tree/, parts/, journal)
    DIR/.lock                                     one sync at a time (flock)

A version id is ``<sequence>-<UTC time>`` (``000012-20250102T030405Z``); ids sort by age.

How a sync runs:

1. List the prefix (ListObjectsV2, paginated: key, size, ETag) and compare it with the manifest of the
   current version. Nothing added, changed (other ETag or size) or removed: no new version, no GET, exit 0.
   The same content as an older version still on disk: ``current`` is switched back to it, no GET.
2. Otherwise build a new version in ``versions/.staging-<id>``: files whose content (ETag and size) the
   current version already has are hard-linked from it, as are files a killed earlier sync had finished;
   the rest is downloaded in parallel (s3transfer: ranged GETs of an eighth of the largest object, 8 to 64
   MiB, every GET conditional on the listed ETag, so an object replaced during the sync fails it instead of
   mixing).
3. Check every downloaded file: its size, and the md5 against the ETag (for a multipart ETag ``<hex>-N``
   the md5 of the N parts' md5s; the part size comes from HeadObject with PartNumber=1). Where the ETag is
   no md5 (SSE-KMS, SSE-C) a full-object S3 checksum (SHA256, SHA1, CRC32) is checked if the object has
   one, else the size only ("unverified" in the output). A mismatch is downloaded again (``--retries``
   attempts in all), then the sync fails and nothing is switched.
4. Write the manifest, rename the staging tree to ``versions/<id>``, then switch ``current``: a new
   symlink under a temporary name, renamed over ``current`` (atomic). The new tree reaches the disk first
   (one syncfs of its filesystem; ``--no-fsync`` skips that). Files are mode 0644 and directories 0755 whatever the umask, so
   Triton's user can read them.
5. Prune: keep ``--keep`` versions, the current one included; older ones are renamed away, then deleted.
   With ``--keep 1`` the previous version goes right after the switch, maybe while Triton still reads
   it: keep 2 or more.

A sync killed at any point leaves ``current`` at a complete version; the next run deletes leftovers and
reuses what the dead run had downloaded and checked. Versions share unchanged files as hard links: never
edit a file under ``DIR`` in place (change it in S3 and sync).

Options:

  --source s3://BUCKET[/PREFIX]  the repository in S3 (required)
  --dest DIR                     the repository root on the host (required; created if missing)
  --endpoint-url URL             another S3 endpoint (an S3-compatible store, a VPC endpoint)
  --region REGION                the bucket's region (default: boto3's configuration)
  --path-style                   path-style addressing (some S3-compatible stores need it)
  --concurrency N                parallel GET requests (default 16)
  --keep N                       versions kept on disk, the current one included (default 3)
  --retries N                    download attempts per object when a check fails (default 3)
  --allow-empty                  accept an empty prefix (default: an empty listing fails the sync)
  --dry-run                      list and compare only: report what would change, download nothing
  --no-fsync                     skip the fsyncs (faster; after a power cut ``current`` may then show
                                 files whose data never reached the disk)
  --json                         one JSON object on stdout instead of the summary line

Credentials: boto3's default provider chain only (environment, shared config and credentials files,
SSO, the instance profile through IMDS). The agent takes no keys as options and prints none.

Output: on a terminal a progress line on stderr, then one summary line on stdout, such as::

    synced 000004-20250102T030405Z: 1 added, 2 changed, 1 removed, 37 unchanged; 3 downloaded (12.3 MB), 37 linked in 1.4 s; models: +bert ~resnet50 -old
    no changes: 000004-20250102T030405Z (41 files) in 0.2 s
    switched to 000002-20250101T120000Z (already on disk): 0 added, 1 changed, 0 removed, 40 unchanged in 0.2 s; models: ~resnet50

``--json`` prints one object: ``status`` ("synced", "switched", "unchanged", "dry-run", "failed"),
``version``, ``previous``, ``files`` (paths ``added``/``changed``/``removed``), ``unchanged`` (a count),
``models`` (the top-level directories ``added``/``changed``/``removed``: what a reload has to load,
reload or unload), ``downloaded``, ``bytes``, ``linked``, ``resumed``, ``retries``, ``unverified``,
``pruned``, ``requests`` (S3 requests sent, by operation), ``seconds``, ``warnings``, ``error``.

Exit codes: 0 synced or nothing to do, 1 the sync failed (nothing was switched), 2 bad arguments. Errors
are one line on stderr.

IAM policy the host's role needs (nothing else)::

    {"Version": "2012-10-17", "Statement": [
      {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::BUCKET",
       "Condition": {"StringLike": {"s3:prefix": ["PREFIX/*"]}}},
      {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::BUCKET/PREFIX/*"}]}

(HeadObject is authorized by ``s3:GetObject``; an SSE-KMS bucket also needs ``kms:Decrypt`` on its key;
a source without a prefix needs ``s3:ListBucket`` without the condition and ``s3:GetObject`` on
``arn:aws:s3:::BUCKET/*``.)
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from .integrity import Damage, Stamps, check, reusable
from .layout import LOCK_WAIT, Repo, Staging
from .manifest import Entry, SyncError, diff, model_changes
from .remote import CONNECT_TIMEOUT, DEADLINE, HARD_STOP, READ_TIMEOUT, Phase, Remote, describe, make_client
from .verify import (
    EMPTY_MD5,
    checksum_matches,
    etag_parts,
    full_object_checksum,
    guess_parts,
    hash_file,
    uniform_parts,
)

if TYPE_CHECKING:  # the live reload is imported by the command line only when servers are given
    from .live import Live

MiB = 1024 * 1024
SWITCH_BOUND = 60.0  # seconds for the commit, the switch and the prune (local disk work)
PART_SIZE = 8 * MiB  # the smallest range of a ranged GET
MAX_PART_SIZE = 64 * MiB


def range_size(largest: int) -> int:
    """Size of the ranged GETs (and the threshold for them): an eighth of the largest object, whole MiB,
    8 to 64 MiB. Fewer, larger ranges cost fewer requests; eight in flight still fill the link."""
    return min(MAX_PART_SIZE, max(PART_SIZE, -(-largest // 8 // MiB) * MiB))


_SOURCE = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?", re.DOTALL)


def parse_source(url: str) -> tuple[str, str]:
    """(bucket, prefix) of ``s3://bucket[/prefix]``; the prefix ends with "/" or is empty."""
    m = _SOURCE.fullmatch(url)
    if not m or ".." in m.group(1):
        raise ValueError(f"not an S3 URL s3://BUCKET[/PREFIX]: {url!r}")
    prefix = m.group(2) or ""
    if any(ord(c) < 32 or ord(c) == 127 for c in prefix):
        raise ValueError(f"control character in the prefix of {url!r}")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return m.group(1), prefix


@dataclass
class Options:
    bucket: str
    prefix: str
    dest: str
    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool = False
    concurrency: int = 16
    keep: int = 3
    retries: int = 3
    allow_empty: bool = False
    dry_run: bool = False
    durable: bool = True
    connect_timeout: float = CONNECT_TIMEOUT
    read_timeout: float = READ_TIMEOUT
    deadline: float | None = DEADLINE  # of the S3 part (listing, downloads, checks); None: none
    lock_wait: float = LOCK_WAIT  # for another sync's lock, before its holder is ended (stuck) or named
    hard_stop: bool = False  # exit the process when the deadline's alarm could not stop the S3 part (the CLI)
    verify: bool = False  # hash every file of the current version (else only those whose inode changed)

    @property
    def source(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass
class Result:
    status: str = "failed"  # "synced", "switched", "unchanged", "dry-run", "failed"
    version: str | None = None
    previous: str | None = None
    files: dict[str, list[str]] = field(default_factory=lambda: {"added": [], "changed": [], "removed": []})
    unchanged: int = 0
    models: dict[str, list[str]] = field(default_factory=lambda: {"added": [], "changed": [], "removed": []})
    downloaded: int = 0  # files fetched from S3
    bytes: int = 0  # their size
    linked: int = 0  # files hard-linked instead (from the current version or a dead run's staging)
    resumed: int = 0  # of those, from a dead run's staging
    retries: int = 0  # downloads repeated after a failed check
    unverified: list[str] = field(default_factory=list)  # paths checked by size only
    pruned: list[str] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    reload: dict | None = None  # with servers: what the live reload did (live.Outcome)
    damaged: dict[str, str] = field(default_factory=dict)  # path -> what is wrong, in the current version
    repaired: dict[str, str] = field(default_factory=dict)  # of those, put right in the new current version
    hashed: int = 0  # files of the current version hashed by the check
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    error: str | None = None


class Progress:
    """What a sync reports as it goes (this one reports nothing)."""

    def begin(self, files: int, nbytes: int) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        pass

    def file_done(self) -> None:
        pass


def run(opts: Options, progress: Progress | None = None, live: Live | None = None) -> Result:
    """Sync once (then reload the servers ``live`` knows, see ``live.py``); the result says how it went
    (``status`` "failed" and ``error`` when it did not)."""
    started = time.monotonic()
    result = Result()
    remote = None
    try:
        remote = Remote(make_client(opts), Phase(opts.deadline, HARD_STOP if opts.hard_stop else None))
        _sync(opts, remote, progress or Progress(), result, live)
    except Exception as exc:  # one line for the caller, whatever went wrong
        result.status = "failed"
        result.error = _no_space(exc, opts.dest) or describe(exc, remote)
    finally:
        result.seconds = round(time.monotonic() - started, 3)
        if remote:
            result.requests = dict(sorted(remote.requests.items()))
        if live:
            result.reload = asdict(live.outcome)
    return result


def _sync(opts: Options, remote: Remote, progress: Progress, result: Result, live: Live | None) -> None:
    repo = Repo(opts.dest)
    # the lock records this run's bound (the S3 part's deadline, then the reload's own timeouts): a run
    # that waits for the lock ends this one once it is well past it (stuck)
    bound = None if opts.deadline is None else opts.deadline + SWITCH_BOUND
    with repo.locked(opts.lock_wait, bound, result.warnings) as lock:
        current = result.previous = repo.current()
        served = live.served(repo, current) if live else current
        old: dict[str, Entry] = {}
        if current:
            try:
                old = repo.manifest(current)
            except (OSError, ValueError) as exc:
                result.warnings.append(f"current version {current} has no readable manifest ({exc}); "
                                       "downloading everything")
                current = None
        stamps = Stamps(repo.root)
        damage = Damage()
        if current:  # files that rotted on disk: missing, another size, changed since last found good
            mode = "all" if opts.verify else "changed" if stamps.found or not opts.dry_run else "stat"
            damage = check(repo.path(current), old, stamps, mode)
            result.damaged, result.hashed = damage.files, damage.hashed
            if live:
                live.repaired = sorted({p.split("/", 1)[0] for p in damage.files if "/" in p})
            lock.record(bound)  # the check is local disk work (all of it hashed by verify): the bound starts now
        with remote.phase.armed():  # the S3 part: nothing in it changes what current shows
            new = remote.list(opts.bucket, opts.prefix)
            if not new and not opts.allow_empty:
                raise SyncError(f"no objects under {opts.source}; refusing to empty the repository "
                                "(--allow-empty to accept)")
            d = diff(old, new)
            result.files = {"added": d.added, "changed": d.changed, "removed": d.removed}
            result.unchanged = len(d.unchanged)
            result.models = model_changes(old, new, d)
            if opts.dry_run:
                result.status, result.version = "dry-run", current
                result.bytes = sum(new[p].size for p in d.added + d.changed)
                if live:
                    live.outcome.pending = served != current
                return
            stale = repo.stale_staging()
            if current and d.empty and not damage:
                result.status, result.version = "unchanged", current
            else:
                result.version = _older_twin(repo, current, new, stamps)
                if result.version:
                    result.status = "switched"
                else:
                    sound = {p: e for p, e in old.items() if p not in damage.files}
                    result.version = _build(opts, repo, remote, progress, result, current, sound, new, stale,
                                            stamps)
                    result.status = "synced"
                    stale = []  # _build has used and removed them
                result.repaired = {p: why for p, why in damage.files.items() if p in new}
        remote.phase("switching and reloading")
        if live:
            lock.record(live.bound(len(sum(result.models.values(), []))) + SWITCH_BOUND)
        if result.status == "unchanged":
            if live and served != current:  # a reload a killed run owes
                live.before_switch(repo, served)
        else:
            if live:
                live.before_switch(repo, served)
            repo.switch(result.version, opts.durable)
        if live:
            try:
                live.after_switch(repo, served, result.version)
            except SyncError:
                result.version = repo.current()
                raise
        for s in stale:
            repo.remove(os.path.basename(s.root))
        result.pruned = repo.prune(opts.keep)
        # every file of the current version was found good by now: stamp them, after the links and prunes
        # that changed their inodes' ctime
        now = repo.current()
        if now:
            root = repo.path(now)
            stamps.save([os.path.join(root, p) for p in repo.manifest(now)])


def _older_twin(repo: Repo, current: str | None, new: dict[str, Entry], stamps: Stamps) -> str | None:
    """The newest complete version but the current one whose manifest has exactly the remote's content,
    and whose files still match it."""
    for version in reversed(repo.complete()):
        if version == current:
            continue
        try:
            manifest = repo.manifest(version)
            if diff(manifest, new).empty and not check(repo.path(version), manifest, stamps, "changed"):
                return version
        except (OSError, ValueError):
            continue
    return None


def _build(opts: Options, repo: Repo, remote: Remote, progress: Progress, result: Result, current: str | None,
           old: dict[str, Entry], new: dict[str, Entry], stale: list[Staging], stamps: Stamps) -> str:
    """Build the new version in staging (links, then downloads) and commit it; returns its id. A file on disk
    is linked only while it matches its entry (``integrity.reusable``); ``old``: the current version's
    entries that are not damaged."""
    sources: dict[tuple[str, int], tuple[str, Entry, bool]] = {}  # content -> (file, its entry, resumed)
    for s in reversed(stale):  # newest last, so newest wins
        for e in s.journaled().values():
            sources[e.content] = (os.path.join(s.tree, e.path), e, True)
    if current:
        for e in old.values():
            sources[e.content] = (os.path.join(repo.path(current), e.path), e, False)
    staging = repo.new_staging()
    sound: dict[str, bool] = {}  # source file -> reusable (hashed at most once)
    try:
        todo: dict[tuple[str, int], list[Entry]] = {}
        for path in sorted(new):
            e = new[path]
            src = sources.get(e.content)
            if src and src[0] not in sound:
                sound[src[0]] = reusable(src[0], src[1], stamps)
            if src and sound[src[0]]:
                staging.place(replace(e, md5=src[1].md5, verified=src[1].verified), src[0], link=True)
                result.linked += 1
                result.resumed += src[2]
            else:
                todo.setdefault(e.content, []).append(e)
        for s in stale:  # what was worth keeping is linked now: at most one staging dir stays after a failure
            repo.remove(os.path.basename(s.root))
        groups = list(todo.values())
        need = sum(g[0].size for g in groups)
        _check_space(repo.root, need, len(groups))
        progress.begin(len(groups), need)
        if groups:
            _Fetcher(opts, remote, staging, progress, result).run(groups)
        missing = set(new) - set(staging.placed)
        if missing:
            raise SyncError(f"internal error: {len(missing)} files not placed, e.g. {sorted(missing)[0]}")
        staging.close()
        version = repo.commit(staging, staging.placed, opts.source, opts.durable)
    finally:
        staging.close()
    repo.remove(os.path.basename(staging.root))  # what is left of it: parts/ and the journal
    return version


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
            if entry.size == 0 and entry.etag.lower() == EMPTY_MD5:
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
        parts = etag_parts(etag)
        # multipart: first the part size SDKs use (whole MiB, the smallest giving N parts), which needs no
        # HeadObject; then the size of part 1 as S3 reports it
        guess = guess_parts(entry.size, parts) if parts else None
        md5, got = hash_file(path, guess or (self._uniform_parts(entry, parts) if parts else None))
        if parts is not None and got == etag:
            return md5, "multipart-md5" if parts else "md5"
        if guess:
            sizes = self._uniform_parts(entry, parts)
            if sizes and sizes != guess:
                md5, got = hash_file(path, sizes)
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
            if exact and hash_file(path, exact)[1] == etag:
                return md5, "multipart-md5"
            return f"content does not match the ETag {entry.etag} (got {got})"
        checksum = full_object_checksum(head)
        if checksum is None:
            return md5, "size"
        if checksum_matches(path, *checksum):
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
        return uniform_parts(entry.size, self._first_part[entry.key], count)

    def _exact_parts(self, entry: Entry, count: int) -> list[int] | None:
        """Every part's size (a HeadObject each, once), when they differ from the uniform guess."""
        if entry.key not in self._all_parts:
            sizes = [self._first_part[entry.key]] + [self._head(entry.key, part=i)["ContentLength"]
                                                      for i in range(2, count + 1)]
            ok = sum(sizes) == entry.size and sizes != self._uniform_parts(entry, count)
            self._all_parts[entry.key] = sizes if ok else None
        return self._all_parts[entry.key]
