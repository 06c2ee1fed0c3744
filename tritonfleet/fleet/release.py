"""Release pointers of pull-mode hosts (issue 27): the controller's side, which writes and reads them.

Below a release root ``R = s3://BUCKET/PREFIX`` (the hosts' ``models_s3_uri``)::

    R/RELEASE            the fleet's pointer
    R/RELEASE.<group>    a host group's pointer (host data ``models_pull_group``), e.g. the canary's
    R/<release>/...      each release: a Triton model repository (``<model>/config.pbtxt``, ...)

A pointer is UTF-8 text of at most :data:`MAX_BODY` bytes whose first non-blank line names the release,
relative to ``R`` (``v2``, ``releases/2026-11-27``) or as a full ``s3://`` URI below it; the lines after it are
free text. :func:`release` writes ``<release>\\n# released <ISO time> by <user>@<host>\\n`` with one PutObject
per pointer (atomic in S3). A fleet release writes ``RELEASE`` and then rewrites every existing
``RELEASE.<group>`` with the same body, so the groups follow the fleet again; a group release writes only its
own pointer. A host whose group has no pointer follows ``RELEASE``.

What a release name may be is the host agent's rule (:func:`tritonfleet.agent.pull.parse_pointer`, which
``tritonfleet-agent pull`` reads pointers with): :func:`parse_pointer` and :func:`check_relative` apply it, so the
controller never writes a pointer the hosts refuse.
The S3 calls take any boto3 S3 client; :func:`client` makes one with the fleet's retries. Every failure is a
:class:`ReleaseError`, one line that names the object and says what to do.
"""

from __future__ import annotations

import getpass
import logging
import re
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from tritonfleet.agent import pull
from tritonfleet.fleet import aws
from tritonfleet.fleet.tags import FleetError

logger = logging.getLogger(__name__)

#: The fleet pointer's name; a group's is ``RELEASE.<group>`` (names relative to the release root).
POINTER = "RELEASE"
#: Bytes a pointer's body may have.
MAX_BODY = pull.POINTER_LIMIT
#: A release root: ``s3://BUCKET[/PREFIX]`` (the bucket as the models role's ``models_s3_uri`` accepts it).
ROOT_RE = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>\S*))?$")
#: A host group's name (``RELEASE.<group>``, host data ``models_pull_group``).
GROUP_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
#: The ContentType of a pointer object.
CONTENT_TYPE = "text/plain"
#: Model directories :func:`check_release` looks into for a ``config.pbtxt`` before it refuses the release.
MAX_MODELS_CHECKED = 200
_READ_LIMIT = 1 << 20  # bytes of a pointer object read (a body over MAX_BODY is refused anyway)
_EXAMPLE = "like v2 or releases/2026-11-27 (letters, digits, . _ - and /; no empty, . or .. component)"
#: The IAM action each S3 call of this module needs (an AccessDenied names it).
_ACTIONS = {"get_object": "s3:GetObject", "put_object": "s3:PutObject", "delete_object": "s3:DeleteObject",
            "list_objects_v2": "s3:ListBucket"}
_CREDENTIALS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "TokenRefreshRequired",
                "InvalidToken")
_REGION = ("PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException")


class ReleaseError(FleetError):
    """A release that cannot be written or read; ``str(e)`` is one line for the user. ``written``: the pointer
    names written before the failure (a fleet release that failed half way), ``previous``: their bodies before
    (for :func:`rollback`)."""

    def __init__(self, message: str, written: list[str] | None = None,
                 previous: dict[str, str | None] | None = None) -> None:
        super().__init__(" ".join(message.split()))
        self.written = list(written or [])
        self.previous = dict(previous or {})


# -- names, pure ----------------------------------------------------------------------------------------------

def parse_root(uri: str) -> tuple[str, str]:
    """``s3://BUCKET/PREFIX`` -> ``("BUCKET", "PREFIX")`` (the prefix without slashes at its ends, "" for a
    bucket's top). ReleaseError for anything else."""
    m = ROOT_RE.match(uri.strip()) if isinstance(uri, str) else None
    prefix = (m.group("prefix") or "").strip("/") if m else ""
    if not m or (prefix and any(p in ("", ".", "..") for p in prefix.split("/"))):
        raise ReleaseError(f"release root {uri!r}: expected s3://BUCKET/PREFIX, the hosts' models_s3_uri")
    return m.group("bucket"), prefix


def root_uri_of(bucket: str, prefix: str) -> str:
    """``s3://bucket/prefix`` (no trailing slash)."""
    return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"


def parent_root(release_uri: str) -> str:
    """The release root of a full release URI given alone: its parent prefix (``s3://b/p/v2/`` -> ``s3://b/p``)."""
    text = release_uri.strip().rstrip("/")
    bucket, prefix = parse_root(text) if text.startswith("s3://") else ("", "")
    if not prefix:
        raise ReleaseError(f"release {release_uri!r}: expected s3://BUCKET/PREFIX/RELEASE, or a release name "
                           "with --root s3://BUCKET/PREFIX")
    return root_uri_of(bucket, prefix.rpartition("/")[0])


def validate_group(name: str) -> str:
    """``name`` when it is a group's name (``RELEASE.<name>``); ReleaseError otherwise."""
    if not isinstance(name, str) or not GROUP_RE.match(name):
        raise ReleaseError(f"group {name!r}: expected 1-63 of a-z 0-9 _ -, starting with a letter or digit "
                           "(the hosts' models_pull_group)")
    return name


def pointer_name(group: str | None = None) -> str:
    """``RELEASE`` or ``RELEASE.<group>``: the pointer's name relative to the root."""
    return POINTER if group is None else f"{POINTER}.{validate_group(group)}"


def pointer_key(prefix: str, group: str | None = None) -> str:
    """The S3 key of the fleet's pointer (``group`` None) or of a group's, below ``prefix``."""
    prefix = prefix.strip("/")
    name = pointer_name(group)
    return f"{prefix}/{name}" if prefix else name


def group_of(name: str) -> str | None:
    """The group of a pointer name (``RELEASE.canary`` -> ``canary``; ``RELEASE`` -> None); ReleaseError when
    ``name`` is no pointer's."""
    if name == POINTER:
        return None
    if name.startswith(POINTER + ".") and GROUP_RE.match(name[len(POINTER) + 1:]):
        return name[len(POINTER) + 1:]
    raise ReleaseError(f"{name!r} is not a pointer's name: expected {POINTER} or {POINTER}.<group>")


def check_relative(name: str) -> str:
    """``name`` when it is a release relative to the root, by the host agent's rule (what the hosts accept);
    ReleaseError (saying why) otherwise."""
    try:
        if "\n" not in name and pull.parse_pointer(name.encode(), "", "") == name:
            return name
    except pull.PointerError:
        pass
    if name.split("/")[0].startswith(POINTER):
        raise ReleaseError(f"release {name!r} names a pointer ({POINTER}...), not a release: expected a release "
                           f"{_EXAMPLE}")
    raise ReleaseError(f"release {name!r}: expected a release {_EXAMPLE}, or a full s3:// URI below the root")


def relative_release(root_uri: str, release: str) -> str:
    """The release ``release`` names, relative to ``root_uri``: ``v2``, ``v2/``, ``releases/2026-11-27`` or a full
    ``s3://BUCKET/PREFIX/v2/`` below the root give ``v2`` (...). ReleaseError for anything else (another bucket
    or prefix, the root itself, ``..``, a pointer's name)."""
    bucket, prefix = parse_root(root_uri)
    text = release.strip() if isinstance(release, str) else ""
    name = text
    if text.startswith("s3://"):
        root = root_uri_of(bucket, prefix) + "/"
        if not text.startswith(root):
            raise ReleaseError(f"release {text} is not below the release root {root_uri_of(bucket, prefix)}: "
                               f"name a release under it (e.g. v2 or {root}v2), or pass that release's root "
                               "(--root)")
        name = text[len(root):]
    name = name.rstrip("/") if name.endswith("/") else name
    if not name:
        raise ReleaseError(f"release {release!r} names no release (the release root itself): expected a release "
                           f"{_EXAMPLE}")
    return check_relative(name)


def _iso(now: datetime | float) -> str:
    when = datetime.fromtimestamp(now, timezone.utc) if isinstance(now, (int, float)) else now
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pointer_body(release: str, now: datetime | float, who: str) -> str:
    """A pointer's body: the relative ``release``, then ``# released <ISO time, UTC> by <who>`` (``now``: a
    datetime, naive ones taken as UTC, or epoch seconds; ``who``: ``user@host``, shortened to fit
    :data:`MAX_BODY`)."""
    name = check_relative(release)
    head = f"{name}\n"
    if len(head.encode()) >= MAX_BODY:
        raise ReleaseError(f"release {name[:60]!r}...: too long for a pointer (at most {MAX_BODY - 2} bytes)")
    who = " ".join(str(who).split()) or "unknown"
    note = f"# released {_iso(now)} by "
    room = MAX_BODY - len(head.encode()) - len(note.encode()) - 1
    if room <= 0:
        return head
    return f"{head}{note}{who.encode()[:room].decode(errors='ignore')}\n"


def parse_pointer(body: str | bytes, root: str | None = None) -> str:
    """The release a pointer's ``body`` names, relative to the release root, by the host agent's own rule
    (:func:`tritonfleet.agent.pull.parse_pointer`: what the hosts will read): its first non-blank line, stripped;
    a full ``s3://`` URI in it is made relative to ``root`` (needed then). ReleaseError when the body is no
    pointer (over :data:`MAX_BODY` bytes, not UTF-8, empty, naming no release)."""
    data = body.encode("utf-8", "surrogateescape") if isinstance(body, str) else bytes(body)
    if root is None and data.lstrip().startswith(b"s3://"):
        raise ReleaseError("the pointer names a full URI: it is read against its release root")
    bucket, prefix = parse_root(root) if root is not None else ("", "")
    prefix = prefix.strip("/")
    try:
        return pull.parse_pointer(data, bucket, f"{prefix}/" if prefix else "")
    except pull.PointerError as exc:
        raise ReleaseError(str(exc)) from None


def default_who() -> str:
    """``user@host`` of this process, for a pointer's note."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname() or 'unknown'}"


# -- S3 ---------------------------------------------------------------------------------------------------------

def client(region: str | None = None, endpoint: str | None = None) -> Any:
    """An S3 client with the fleet's retries (:func:`tritonfleet.fleet.aws.client`)."""
    return aws.client("s3", region, endpoint=endpoint)


def _explain(exc: BaseException, op: str, bucket: str, key: str | None) -> str:
    """A botocore failure of ``op`` on ``s3://bucket/key`` (a listing's prefix for ListObjectsV2) as one line."""
    where = f"s3://{bucket}/{key}" if key is not None else f"s3://{bucket}"
    code = aws.error_code(exc)
    verb = {"get_object": "reading", "put_object": "writing", "delete_object": "deleting",
            "list_objects_v2": "listing"}.get(op, op)
    if code in ("AccessDenied", "403", "Forbidden", "AllAccessDisabled"):
        action = _ACTIONS.get(op, op)
        resource = f"arn:aws:s3:::{bucket}" + (f"/{key}" if key is not None and op != "list_objects_v2" else "")
        extra = (" (and s3:ListBucket on the bucket: without it a missing object reads as AccessDenied)"
                 if op == "get_object" else "")
        return (f"{where}: access denied {verb} it: the identity running tritonfleet needs {action} on "
                f"{resource}{extra}")
    if code == "NoSuchBucket":
        return f"{where}: bucket {bucket} does not exist: check the release root (and the endpoint URL)"
    if code in _CREDENTIALS:
        return (f"{where}: {code} {verb} it: the AWS credentials are not valid for this store: check the "
                "profile or environment (and the endpoint URL)")
    if code in _REGION:
        return f"{where}: {aws.one_line(exc)}: the bucket is in another region: pass its region (--region)"
    if isinstance(exc, EndpointConnectionError):
        return f"{where}: {aws.one_line(exc)}: check the endpoint URL, the region and the network"
    return f"{where}: {verb} it failed: {aws.one_line(exc)}"


def _call(s3: Any, op: str, bucket: str, key: str | None, **kwargs: Any) -> Any:
    """``s3.<op>(Bucket=bucket, **kwargs)``; a failure is a ReleaseError naming ``key`` (a listing's prefix when
    None)."""
    key = kwargs.get("Prefix") if key is None else key
    try:
        return getattr(s3, op)(Bucket=bucket, **kwargs)
    except (ClientError, BotoCoreError) as exc:
        raise ReleaseError(_explain(exc, op, bucket, key)) from None


def _read(s3: Any, bucket: str, key: str) -> tuple[str | None, datetime | None]:
    """A pointer's body (None when there is no such object; bytes that are not UTF-8 kept as surrogates, so the
    body written back is the same bytes) and its LastModified."""
    try:
        got = s3.get_object(Bucket=bucket, Key=key)
        data = got["Body"].read(_READ_LIMIT)
    except ClientError as exc:
        if aws.error_code(exc) in ("NoSuchKey", "404", "NotFound"):
            return None, None
        raise ReleaseError(_explain(exc, "get_object", bucket, key)) from None
    except BotoCoreError as exc:
        raise ReleaseError(_explain(exc, "get_object", bucket, key)) from None
    return data.decode("utf-8", "surrogateescape"), got.get("LastModified")


def _write(s3: Any, bucket: str, key: str, body: str) -> None:
    _call(s3, "put_object", bucket, key, Key=key, Body=body.encode("utf-8", "surrogateescape"), ContentType=CONTENT_TYPE)
    logger.debug("wrote s3://%s/%s: %s", bucket, key, body.splitlines()[0])


def _list(s3: Any, bucket: str, prefix: str, **kwargs: Any) -> list[dict[str, Any]]:
    """Every page of a ListObjectsV2 of ``prefix``."""
    pages, token = [], None
    while True:
        page = _call(s3, "list_objects_v2", bucket, None, Prefix=prefix, **kwargs,
                     **({"ContinuationToken": token} if token else {}))
        pages.append(page)
        token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
        if not token:
            return pages


def _base(prefix: str) -> str:
    return f"{prefix}/" if prefix else ""


def group_pointers(s3: Any, bucket: str, prefix: str) -> list[str]:
    """The names of the group pointers (``RELEASE.<group>``) below the root, sorted."""
    start = _base(prefix) + POINTER + "."
    names = [o["Key"][len(_base(prefix)):] for page in _list(s3, bucket, start, Delimiter="/")
             for o in page.get("Contents", [])]
    return sorted(n for n in names if GROUP_RE.match(n[len(POINTER) + 1:]))


def check_release(s3: Any, root_uri: str, release: str) -> str:
    """Refuse a release whose prefix holds no objects, or no ``<model>/config.pbtxt`` (a Triton model
    repository's); returns its ``s3://.../<release>/``. Listings with MaxKeys, not the whole tree."""
    bucket, prefix = parse_root(root_uri)
    name = relative_release(root_uri, release)
    base = f"{_base(prefix)}{name}/"
    where = f"s3://{bucket}/{base}"
    first = _call(s3, "list_objects_v2", bucket, None, Prefix=base, Delimiter="/", MaxKeys=1000)
    files = [o["Key"] for o in first.get("Contents", []) if not o["Key"].endswith("/")]
    models = [p["Prefix"] for p in first.get("CommonPrefixes", [])]
    if not files and not models:
        raise ReleaseError(f"{where} holds no objects: upload the repository first (e.g. aws s3 sync REPO/ "
                           f"{where}), or name another release")
    token = first.get("NextContinuationToken") if first.get("IsTruncated") else None
    looked = 0
    while looked < MAX_MODELS_CHECKED:
        if not models:
            if not token:
                break
            more = _call(s3, "list_objects_v2", bucket, None, Prefix=base, Delimiter="/", MaxKeys=1000,
                         ContinuationToken=token)
            models = [p["Prefix"] for p in more.get("CommonPrefixes", [])]
            token = more.get("NextContinuationToken") if more.get("IsTruncated") else None
            continue
        config = models.pop(0) + "config.pbtxt"
        looked += 1
        found = _call(s3, "list_objects_v2", bucket, None, Prefix=config, MaxKeys=1).get("Contents", [])
        if any(o["Key"] == config for o in found):
            return where
    which = ("it has no model directories" if not looked else
             f"none of the first {looked} directories has one" if models or token else
             f"none of its {looked} directories has one")
    raise ReleaseError(f"{where} holds no <model>/config.pbtxt ({which}): a Triton model repository has a "
                       "directory per model with its config.pbtxt; upload the repository there, or pass "
                       "--no-check to release it anyway")


def describe(body: str | None, root_uri: str) -> str | None:
    """What a pointer's ``body`` names, for a message: the release, None for no pointer, ``invalid: '<its first
    line>'`` for a body that names none."""
    if body is None:
        return None
    try:
        return parse_pointer(body, root_uri)
    except ReleaseError:
        text = body.encode("utf-8", "surrogateescape")[:MAX_BODY].decode("utf-8", "replace")
        line = next((x.strip() for x in text.splitlines() if x.strip()), "")
        return f"invalid: {line[:80]!r}"


def release(s3: Any, root_uri: str, release: str, group: str | None = None, *, check: bool = True,
            now: datetime | float | None = None, who: str | None = None) -> dict[str, Any]:
    """Point the fleet (``group`` None) or one group at ``release`` (relative to ``root_uri`` or a full URI below
    it). With ``check``, :func:`check_release` first. The fleet's release writes ``RELEASE`` and then rewrites
    every existing ``RELEASE.<group>`` with the same body; a group's writes ``RELEASE.<group>`` only. Every
    pointer's previous body is read before anything is written.

    Returns ``{"root", "release", "group", "pointer", "body", "written": [names, in order], "previous": {name:
    body before, None where there was none}, "was": {name: what it named (:func:`describe`)}}``; pass it (or its
    ``previous``) to :func:`rollback`. A failed write raises ReleaseError with ``written`` and ``previous`` of
    what was done."""
    bucket, prefix = parse_root(root_uri)
    root = root_uri_of(bucket, prefix)
    name = relative_release(root, release)
    target = pointer_name(group)
    if check:
        check_release(s3, root, name)
    body = pointer_body(name, now if now is not None else datetime.now(timezone.utc), who or default_who())
    previous: dict[str, str | None] = {target: _read(s3, bucket, pointer_key(prefix, group))[0]}
    names = [target] + (group_pointers(s3, bucket, prefix) if group is None else [])
    for n in names[1:]:
        previous[n] = _read(s3, bucket, pointer_key(prefix, group_of(n)))[0]
    names = [n for n in names if n == target or previous[n] is not None]  # a group pointer deleted meanwhile
    written: list[str] = []
    for n in names:
        try:
            _write(s3, bucket, pointer_key(prefix, group_of(n)), body)
        except ReleaseError as exc:
            done = f"; written before it: {', '.join(written)} (run it again to finish)" if written else ""
            raise ReleaseError(f"{exc}{done}", written, {w: previous[w] for w in written}) from None
        written.append(n)
    logger.debug("%s/%s -> %s%s", root, target, name,
                f" ({len(written) - 1} group pointers rewritten)" if len(written) > 1 else "")
    return {"root": root, "release": name, "group": group, "pointer": target, "body": body, "written": written,
            "previous": {n: previous[n] for n in written},
            "was": {n: describe(previous[n], root) for n in written}}


def rollback(s3: Any, root_uri: str, previous: dict[str, Any]) -> dict[str, str]:
    """Undo a :func:`release`: ``previous`` is its result (or the result's ``previous``, ``{pointer name: body
    before or None}``). Each pointer gets its body back, in the reverse order of the writes; one that did not
    exist before is deleted (a group follows ``RELEASE`` again). Returns ``{name: "restored" | "deleted"}``."""
    bucket, prefix = parse_root(root_uri)
    inner = previous.get("previous")
    bodies: dict[str, Any] = inner if isinstance(inner, dict) else previous
    plan = [(name, group_of(name), body) for name, body in bodies.items()]  # every name checked first
    done: dict[str, str] = {}
    for name, group, body in reversed(plan):
        key = pointer_key(prefix, group)
        if body is None:
            _call(s3, "delete_object", bucket, key, Key=key)
            done[name] = "deleted"
        else:
            _write(s3, bucket, key, str(body))
            done[name] = "restored"
    return done


@dataclass(frozen=True)
class Pointer:
    """One pointer object as read: its ``name`` (``RELEASE``, ``RELEASE.<group>``), ``release`` (None when its
    body names none, ``error`` saying why), ``body`` and ``modified`` (S3's LastModified)."""

    name: str
    key: str
    body: str
    release: str | None
    error: str | None
    modified: datetime | None

    @property
    def note(self) -> str:
        """The body's second non-blank line, without its ``#`` (who released it, when)."""
        text = self.body.encode("utf-8", "surrogateescape")[:MAX_BODY].decode("utf-8", "replace")
        lines = [s.strip() for s in text.splitlines() if s.strip()]
        return lines[1].lstrip("#").strip() if len(lines) > 1 else ""


def read_pointers(s3: Any, root_uri: str) -> list[Pointer]:
    """Every pointer below the root: ``RELEASE`` first, then the groups' by name."""
    bucket, prefix = parse_root(root_uri)
    root = root_uri_of(bucket, prefix)
    keys = [o["Key"] for page in _list(s3, bucket, _base(prefix) + POINTER, Delimiter="/")
            for o in page.get("Contents", [])]
    names = []
    for key in keys:
        try:
            names.append((group_of(key[len(_base(prefix)):]) or "", key[len(_base(prefix)):]))
        except ReleaseError:
            continue  # RELEASEx, RELEASE.Bad: no pointer a host reads
    found = []
    for _group, name in sorted(names):
        key = _base(prefix) + name
        body, modified = _read(s3, bucket, key)
        if body is None:
            continue  # deleted since the listing
        try:
            found.append(Pointer(name, key, body, parse_pointer(body, root), None, modified))
        except ReleaseError as exc:
            found.append(Pointer(name, key, body, None, str(exc), modified))
    return found


def pointers(s3: Any, root_uri: str) -> dict[str, str]:
    """``{pointer name: the release it names}`` for every pointer below the root (``RELEASE`` first); a pointer
    whose body names no release is left out, with a warning."""
    out = {}
    bucket, _prefix = parse_root(root_uri)
    for p in read_pointers(s3, root_uri):
        if p.release is None:
            logger.warning("s3://%s/%s: %s", bucket, p.key, p.error)
        else:
            out[p.name] = p.release
    return out
