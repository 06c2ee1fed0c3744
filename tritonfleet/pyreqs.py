"""Python packages for the python backend, baked into the Triton image (``triton_python_requirements``).

The setting is a controller-side requirements file or a list of lines; every line must pin one exact version
(``name==version``, extras and environment markers allowed), optionally with ``--hash=sha256:...`` (then every
line has hashes and pip runs with ``--require-hashes``). Nothing else: no ranges, URLs, paths, editables,
nested files or pip options; the index is ``triton_pip_index``. Parsing refuses a bad line with a
:class:`RequirementsError` of one line naming it (the caller prefixes host and field).

:meth:`Requirements.render` is the normalized ``requirements.txt`` that goes into the image's build context, and
:meth:`Requirements.digest` its content hash (image tags: an unchanged set never rebuilds). :func:`pip_failure`
turns pip's output in a failed build into one line naming the package and pip's reason;
:func:`import_hint` turns Triton's "No module named ..." on a model load into a hint naming the setting.

Standard library and ``packaging`` (pyinfra's dependency) only, and no pyinfra operations. ``packaging`` is
imported by the parser only: the output and hint functions import with the standard library alone (a host's
agent may use them).
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

#: the image label holding :meth:`Requirements.digest` (what the image's python packages are)
LABEL = "com.tritonfleet.python-requirements"
#: where the build copies requirements.txt to, inside the image (kept there: what the image was built from)
IMAGE_PATH = "/opt/tritonfleet/python-requirements.txt"
#: hash algorithms pip accepts in ``--hash``, with their hex lengths
HASH_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
HEADER = "# written by tritonfleet from triton_python_requirements: one exact pin per line\n"

_COMMENT = re.compile(r"(^|\s+)#.*$")
_INDEX_OPTIONS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--no-index", "--trusted-host",
                  "--pre", "--prefer-binary", "--only-binary", "--no-binary")


class RequirementsError(ValueError):
    """A requirement line tritonfleet will not build (one line: which line, and why)."""


@dataclass(frozen=True)
class Pin:
    """One requirement: ``name[extras]==version ; marker --hash=...``."""

    name: str  # canonical (PEP 503) name
    version: str  # normalized (PEP 440)
    extras: tuple[str, ...] = ()  # sorted, canonical
    marker: str = ""  # ``str(packaging.markers.Marker)``, or empty
    hashes: tuple[str, ...] = ()  # sorted ``alg:hex``, lower case
    where: str = field(default="", compare=False)  # "line 3" / "entry 2" (messages only)

    @property
    def pin(self) -> str:
        """``name[extras]==version`` (no marker, no hashes)."""
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.name}{extras}=={self.version}"

    def render(self) -> str:
        """The line as it goes into the image's requirements.txt."""
        marker = f"; {self.marker}" if self.marker else ""
        hashes = "".join(f" --hash={h}" for h in self.hashes)
        return f"{self.pin}{marker}{hashes}"


@dataclass(frozen=True)
class Requirements:
    """A parsed requirement set, in a deterministic order (name, marker)."""

    pins: tuple[Pin, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.pins)

    def __len__(self) -> int:
        return len(self.pins)

    @property
    def hashed(self) -> bool:
        """Every line has hashes: pip runs with ``--require-hashes``."""
        return bool(self.pins) and all(p.hashes for p in self.pins)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.pins)

    def render(self) -> str:
        """requirements.txt for the image build: a header, then one normalized line per pin, sorted."""
        return HEADER + "".join(p.render() + "\n" for p in self.pins)

    def digest(self) -> str:
        """sha256 (hex) of :meth:`render`: equal sets (whatever their spelling or order) hash the same."""
        return hashlib.sha256(self.render().encode()).hexdigest()


# ------------------------------------------------------------------------------------------------ parsing


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """``[(first line number, line)]`` with backslash continuations joined and comments removed, as pip reads
    a requirements file (a comment line ends a continuation)."""
    out: list[tuple[int, str]] = []
    start = 0
    parts: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        comment = _COMMENT.match(line) is not None
        if line.endswith("\\") and not comment:
            if not parts:
                start = n
            parts.append(line[:-1])
            continue
        if parts:
            out.append((start, "".join(parts) + (" " + line if comment else line)))
            parts = []
        else:
            out.append((n, line))
    if parts:  # a continuation on the last line
        out.append((start, "".join(parts)))
    return [(n, _COMMENT.sub("", line).strip()) for n, line in out]


def _option_reason(token: str) -> str:
    opt = token.split("=", 1)[0]
    if opt in ("-e", "--editable"):
        return "editable installs are not built into images: pin name==version from the index"
    if opt in ("-r", "--requirement", "-c", "--constraint"):
        return "nested requirement or constraint files are not followed: list their lines here"
    if opt in _INDEX_OPTIONS:
        return "index options do not belong in the requirements: the index is triton_pip_index"
    return "pip options are not allowed: only name==version lines, optionally with --hash=sha256:..."


def _hash(value: str) -> str:
    alg, _, digest = value.partition(":")
    alg, digest = alg.lower(), digest.lower()
    if alg not in HASH_LENGTHS:
        raise ValueError(f"--hash={value}: pip takes sha256, sha384 or sha512 hashes (--hash=sha256:<64 hex>)")
    if len(digest) != HASH_LENGTHS[alg] or not all(c in string.hexdigits for c in digest):
        raise ValueError(f"--hash={value}: not a {alg} digest ({HASH_LENGTHS[alg]} hex digits)")
    return f"{alg}:{digest}"


def _options(tokens: list[str]) -> tuple[str, ...]:
    """The hashes of a line's trailing options (``--hash=alg:hex`` or ``--hash alg:hex``)."""
    hashes: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--hash":
            if i + 1 >= len(tokens):
                raise ValueError("--hash needs a value: --hash=sha256:<64 hex>")
            hashes.append(_hash(tokens[i + 1]))
            i += 2
        elif tok.startswith("--hash="):
            hashes.append(_hash(tok[len("--hash="):]))
            i += 1
        else:
            raise ValueError(f"{tok!r} after the requirement: {_option_reason(tok)}")
    return tuple(sorted(set(hashes)))


def _looks_like_location(text: str) -> bool:
    return ("://" in text or text.startswith((".", "/", "~")) or text.endswith((".whl", ".tar.gz", ".zip"))
            or "@" in text)


def canonical_name(name: str) -> str:
    """PEP 503's normalized project name (as ``packaging.utils.canonicalize_name``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_line(line: str, where: str = "") -> Pin:
    """One logical line (comments and continuations already handled) -> :class:`Pin`; ValueError(why)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    tokens = line.split()
    if tokens[0].startswith("-"):
        raise ValueError(_option_reason(tokens[0]))
    first_opt = next((i for i, t in enumerate(tokens) if t.startswith("-")), len(tokens))
    spec, hashes = " ".join(tokens[:first_opt]), _options(tokens[first_opt:])
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        if _looks_like_location(spec):
            raise ValueError("URLs and paths are not allowed: pin name==version from the index") from None
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "unparsable"
        raise ValueError(f"not a requirement ({reason})") from None
    if req.url:
        raise ValueError("direct references (name @ URL) are not allowed: pin name==version from the index")
    specs = list(req.specifier)
    if not specs:
        raise ValueError(f"not pinned: give one exact version, e.g. {req.name}==<version>")
    if len(specs) > 1 or specs[0].operator != "==" or specs[0].version.endswith(".*"):
        raise ValueError(f"not an exact pin ({req.specifier}): use {req.name}==<version>, one version")
    try:
        version = str(Version(specs[0].version))
    except InvalidVersion:
        raise ValueError(f"{specs[0].version!r} is not a valid version") from None
    return Pin(name=canonical_name(req.name), version=version,
               extras=tuple(sorted(canonical_name(e) for e in req.extras)),
               marker=str(req.marker) if req.marker else "", hashes=hashes, where=where)


def _shown(line: str, limit: int = 100) -> str:
    return repr(line if len(line) <= limit else line[:limit - 1] + "…")


def parse(source: str | Sequence[str], origin: str = "") -> Requirements:
    """Parse a requirements file's text (``str``) or a list of lines, one requirement each.

    Raises :class:`RequirementsError` naming the first offending line and why, e.g.
    ``line 3 'emoji>=2': not an exact pin (>=2): use emoji==<version>, one version``.
    ``origin`` (a file name) prefixes the line numbers of a file's text.
    """
    if isinstance(source, str):
        lines = _logical_lines(source)
        label = f"{origin} line" if origin else "line"
    else:
        lines = []
        for n, entry in enumerate(source, 1):
            if not isinstance(entry, str):
                raise RequirementsError(f"entry {n} ({entry!r}) is not a string: give lines like 'name==version'")
            lines.extend((n, text) for _, text in _logical_lines(entry.replace("\n", " ")))
        label = "entry"
    pins: list[Pin] = []
    seen: dict[tuple[str, str], Pin] = {}
    for n, line in lines:
        if not line:
            continue
        where = f"{label} {n}"
        try:
            pin = parse_line(line, where)
        except ValueError as exc:
            raise RequirementsError(f"{where} {_shown(line)}: {exc}") from None
        key = (pin.name, pin.marker)
        if key in seen:
            raise RequirementsError(f"{where} {_shown(line)}: {pin.name} is listed already ({seen[key].where})")
        seen[key] = pin
        pins.append(pin)
    hashed = [p for p in pins if p.hashes]
    if hashed and len(hashed) != len(pins):
        bare = next(p for p in pins if not p.hashes)
        raise RequirementsError(
            f"{bare.where} {_shown(bare.pin)} has no --hash while {hashed[0].where} has one: pip's "
            "--require-hashes needs hashes on every line (or on none)")
    return Requirements(tuple(sorted(pins, key=lambda p: (p.name, p.marker, p.extras))))


def load(value: str | Path | Sequence[str] | None, base_dir: Path | None = None) -> Requirements:
    """The setting's value: a path to a controller-side requirements file (relative to ``base_dir``), a list
    of lines, or None/empty (no extra packages)."""
    if value is None or value == "" or (not isinstance(value, str | Path) and not value):
        return Requirements()
    if isinstance(value, str | Path):
        path = Path(value).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            hint = " (a list of lines is given as a list, e.g. ['emoji==2.14.0'])" if "==" in str(value) else ""
            raise RequirementsError(f"{path}: no such requirements file{hint}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RequirementsError(f"{path}: cannot read it ({exc})") from None
        return parse(text, origin=path.name)
    if isinstance(value, bytes | dict):
        raise RequirementsError(f"{type(value).__name__} given: a requirements file path or a list of lines")
    return parse(list(value))


# ------------------------------------------------------------------------------------------- the index


def check_index_url(url: str) -> None:
    """``triton_pip_index``: an http(s) URL of a PEP 503 simple index, without credentials (they would stay
    in the image's build history: ``docker history`` shows every RUN line)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RequirementsError(f"{url!r} is not an http(s) URL of a package index (e.g. https://pypi.org/simple)")
    if parts.username or parts.password:
        raise RequirementsError(f"{parts.scheme}://{parts.hostname}/...: credentials in the index URL would be "
                                "kept in the image's build history; use an index reachable without them")


def trusted_host(url: str | None) -> str | None:
    """The host pip must be told to trust (``--trusted-host``) for a plain-HTTP index; pip ignores plain-HTTP
    indexes on other hosts than localhost ("not a trusted or secure host")."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return None
    return parts.netloc.rsplit("@", 1)[-1]


def pip_index_args(url: str | None) -> list[str]:
    """pip's index arguments for ``triton_pip_index`` (none: pip's default, PyPI)."""
    if not url:
        return []
    host = trusted_host(url)
    return ["--index-url", url, *(["--trusted-host", host] if host else [])]


# ------------------------------------------------------------------------------------------- the image

#: the template of the layer; its build context holds :data:`CONTEXT_FILE` (:meth:`Requirements.render`)
DOCKERFILE_TEMPLATE = "triton/python-requirements.Dockerfile.j2"
CONTEXT_FILE = "requirements.txt"
#: the repository part of the built image's reference (its tag: :func:`image_tag`)
IMAGE_REPOSITORY = "tritonfleet/tritonserver-python"


def dockerfile(base_image: str, reqs: Requirements, index_url: str | None = None) -> str:
    """The Dockerfile installing ``reqs`` on top of ``base_image`` (the NGC image on GPU hosts, the Neuron
    image on Neuron hosts), with ``index_url`` (``triton_pip_index``) as pip's only index when given."""
    from tritonfleet.templating import render

    if not reqs:
        raise ValueError("no requirements: the serving image needs no python layer")
    return render(DOCKERFILE_TEMPLATE, base_image=base_image, context_file=CONTEXT_FILE, image_path=IMAGE_PATH,
                  require_hashes=reqs.hashed, index_url=index_url or "", trusted_host=trusted_host(index_url) or "",
                  label=LABEL, requirements_hash=reqs.digest())


def build_context(base_image: str, reqs: Requirements, index_url: str | None = None) -> dict[str, str]:
    """``{file name: content}`` of the build context: ``Dockerfile`` and ``requirements.txt``."""
    return {"Dockerfile": dockerfile(base_image, reqs, index_url), CONTEXT_FILE: reqs.render()}


def image_tag(base_image: str, reqs: Requirements, index_url: str | None = None) -> str:
    """``tritonfleet/tritonserver-python:<16 hex>``: the content hash of the Dockerfile, which names the base
    image, the index and (its label) requirements.txt's hash, so one tag is one set of inputs."""
    digest = hashlib.sha256(dockerfile(base_image, reqs, index_url).encode()).hexdigest()[:16]
    return f"{IMAGE_REPOSITORY}:{digest}"


# pip's and Triton's failures in one line: tritonfleet/pipreport.py (re-exported here)
from tritonfleet.pipreport import (  # noqa: E402,F401
    distribution_for,
    import_hint,
    import_hints,
    missing_module,
    pip_failure,
)
