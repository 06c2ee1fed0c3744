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
   With ``--server-capacity`` (the memory check, ``memory.py``), the tree is checked first: every server's
   models in it must fit its devices' memory less ``--memory-headroom``. A plan that does not fit fails the
   sync with one line naming the host, the server, its biggest models, need and capacity; nothing is
   switched and ``current`` keeps serving. The refused tree stays a staging dir (the next run links its
   files instead of downloading them again); a kept version that is refused stays as it is.
   With ``--compat FILE`` (the model check, ``modelcheck.py``), before the memory check every model of the
   version to switch to that this host's servers load (``--server-models``; else every model) is read: the
   compiler and NEFF versions of its Neuron artifacts, judged against the image's limits in FILE (written by
   the models role from ``tritonfleet/compat.py``). A model the image cannot load fails the sync in the same
   way, one error line per such model naming it, what it needs and what to do; a model whose versions are
   unknown is a warning and the switch goes on; a model without Neuron artifacts is not judged.
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
  --compat FILE                  the image's model limits (JSON, tritonfleet.compat.model_limits): the
                                 model check before a switch
  --server-capacity NAME=DEVICESxMIB
                                 server NAME's devices and the MiB each holds: the memory check before a
                                 switch (repeatable; --server-models NAME=... says what it loads, else every
                                 model); --memory-headroom PCT (default 10), --accelerator neuron|gpu (default
                                 neuron) and --host-name NAME (for the error line) go with it

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
``pruned``, ``requests`` (S3 requests sent, by operation), ``seconds``, ``warnings``, ``error``, and with
``--compat`` ``compat`` (null when no version was checked): ``runtime``, ``neuron_arch``, ``verdict`` (the
worst), ``models`` (one object per model with Neuron artifacts: ``model``, ``verdict``, ``line``, ``fix``,
``artifact``) and ``refused`` (the error lines of a refusal).

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

import os
import re
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from .fetch import _check_space, _Fetcher, _no_space
from .integrity import Damage, Stamps, check, reusable
from .layout import LOCK_WAIT, Repo, Staging
from .manifest import Entry, SyncError, diff, model_changes
from .memory import MemoryPlan, MemoryPlanError
from .modelcheck import FAIL, WARN, Limits, check_staged, worst
from .remote import CONNECT_TIMEOUT, DEADLINE, HARD_STOP, READ_TIMEOUT, Phase, Remote, describe, make_client

if TYPE_CHECKING:  # the live reload is imported by the command line only when servers are given
    from .live import Live

SWITCH_BOUND = 60.0  # seconds for the commit, the switch and the prune (local disk work)
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
    memory: MemoryPlan | None = None  # each server's models fit its devices before a switch (memory.py)
    compat: Limits | None = None  # the image loads each Neuron model, checked before a switch (modelcheck.py)
    compat_models: frozenset[str] | None = None  # the models the model check judges (None: every model)

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
    compat: dict | None = None  # with --compat: the model check of the version switched to (or refused)
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
                twin = _older_twin(repo, current, new, stamps)
                if twin:
                    _check_compat(opts, repo.path(twin), current, result)
                    _check_memory(opts, repo.path(twin), current)
                    result.status, result.version = "switched", twin
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


def _check_memory(opts: Options, tree: str, current: str | None) -> None:
    """The servers' models in ``tree`` (the version to switch to) fit their devices (``--server-capacity``);
    else the sync fails before the switch, and ``current`` keeps serving."""
    if opts.memory is None:
        return
    try:
        opts.memory.check(tree)
    except MemoryPlanError as exc:
        keeps = f"current keeps serving {current}" if current else "there is no current version yet"
        raise SyncError(f"{exc}; refused before the switch: {keeps}") from None


def _check_compat(opts: Options, tree: str, current: str | None, result: Result) -> None:
    """The image loads every Neuron model in ``tree`` (the version to switch to) that this host's servers load
    (``--compat``): the lines go to ``result.compat``, warnings to ``result.warnings``; a model it cannot load
    fails the sync before the switch, one line per such model, and ``current`` keeps serving."""
    limits = opts.compat
    if limits is None:
        return
    lines = check_staged(tree, opts.compat_models, limits)
    result.compat = {"runtime": limits.runtime, "neuron_arch": limits.neuron_arch, "verdict": worst(lines),
                     "models": [asdict(line) for line in lines], "refused": []}
    result.warnings += [str(line) for line in lines if line.verdict == WARN]
    failed = [line for line in lines if line.verdict == FAIL]
    if failed:
        keeps = f"current keeps serving {current}" if current else "there is no current version yet"
        refused = result.compat["refused"] = [f"{line}; refused before the switch: {keeps}" for line in failed]
        raise SyncError(" | ".join(refused))


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
        # before the tree becomes a version: refused, it stays a staging dir, whose files the next run links
        _check_compat(opts, staging.tree, current, result)
        _check_memory(opts, staging.tree, current)
        version = repo.commit(staging, staging.placed, opts.source, opts.durable)
    finally:
        staging.close()
    repo.remove(os.path.basename(staging.root))  # what is left of it: parts/ and the journal
    return version
