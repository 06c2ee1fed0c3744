"""The compiler and NEFF versions of a Neuron model, read from its compiled artifacts (host side).

Half of the compatibility chain: before the agent switches to a staged version it reads, for every Neuron
model, which compiler built it and which NEFF version it carries; the other half (what the host's runtime
and SDK accept) lives elsewhere. docs/compatibility-artifacts.md says what is read, from where, how sure
it is and the sources; in short:

* A NEFF file (``*.neff``) is a 1024-byte C-struct header followed by the NEFF's tarball (gzip-compressed
  for ``pkg_version`` 2, a plain tar once ``neuron-packager optimize`` has run). The header holds no magic
  number; it is recognised by its fields: ``pkg_version`` 1 or 2 at offset 0, ``header_size`` 1024 at 8,
  ``data_size`` at 16, ``neff_version_major``/``_minor`` at 24/32, ``neff_build_version`` (text, 128 bytes)
  at 40 and ``name`` (256 bytes) at 220, all little-endian. The NEFF version comes from the header
  (confidence "header"); the compiler version from ``tool_version`` in the tarball's ``info.json``
  (confidence "header": a documented field of a documented member), else from a ``neuronx-cc``-style
  version in the header's name or build field or in the file's path (confidence "pattern").
* A TorchScript archive (``*.pt``, ``*.pth``, ``*.ts``, ``*.torchscript``) traced by torch-neuronx or
  torch-neuron is a zip whose ``code/__torch__/torch_neuronx/`` (or ``torch_neuron/``) members name the
  framework and whose pickled ``torch.classes.neuron.Model`` holds the whole NEFF, header included. The
  reader finds the framework from the member names, then searches the first bytes of ``data.pkl`` (and
  the tensor and constant members) for a NEFF header, and reads that NEFF as above.

Nothing is executed or unpickled: files are read as bytes, zip member names listed, headers unpacked with
:mod:`struct`, strings matched with :mod:`re`, the one JSON member parsed with :mod:`json`. Every read is
bounded (``MAX_READ`` bytes of a file, ``MAX_INFLATE`` bytes inflated, counts of members, headers and
files), and a corrupt, truncated or unknown file gives kind ``"unknown"`` with ``source`` saying why,
never an exception. Standard library only: this module runs on the hosts (Python 3.9 to 3.12).
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

KIND_NEFF = "neff"
KIND_NEURONX = "torchscript-neuronx"
KIND_NEURON = "torchscript-neuron"
KIND_UNKNOWN = "unknown"
NEURONX_CC = "neuronx-cc"
NEURON_CC = "neuron-cc"
# how sure a result is: read from a documented field ("header"), found by a pattern in a name or a free-form
# string ("pattern"), or nothing found ("unknown")
HEADER = "header"
PATTERN = "pattern"
UNKNOWN = "unknown"

ARTIFACT_SUFFIXES = (".neff", ".pt", ".pth", ".ts", ".torchscript")

MIB = 1 << 20
MAX_READ = 8 * MIB  # bytes read from one artifact file, all reads together
MAX_MEMBER_SCAN = 4 * MIB  # bytes of one archive member searched for NEFF headers
MAX_PAYLOAD = 4 * MIB  # compressed bytes of one NEFF's tarball read while looking for info.json
MAX_INFLATE = 32 * MIB  # bytes inflated from one artifact, all its NEFFs together
MAX_INFO_JSON = 256 * 1024  # a larger info.json is not read
MAX_TAR_MEMBERS = 4096  # tarball members looked at before info.json counts as absent
MAX_ZIP_ENTRIES = 100_000  # an archive with more entries (or a larger directory) is not opened
MAX_ZIP_DIRECTORY = 4 * MIB
MAX_MEMBERS_READ = 32  # archive members searched for NEFF headers
MAX_CODE_SCAN = 256 * 1024  # bytes of one TorchScript code member searched for the Neuron class
MAX_CODE_MEMBERS = 16
MAX_NEFFS = 16  # NEFF headers read from one archive
MAX_ARTIFACTS = 64  # artifact files read per model
MAX_WALK = 10_000  # directory entries a model scan visits

NEFF_HEADER_SIZE = 1024
# neff_header_t (docs/compatibility-artifacts.md): pkg_version, header_size, data_size, neff_version_major,
# neff_version_minor (uint64 each, little-endian), then neff_build_version[128]
_HEADER_FIELDS = struct.Struct("<5Q128s")
_NAME_OFFSET, _NAME_SIZE = 220, 256  # char name[256], after num_tpb (4), hash[32] and uuid[16]
# pkg_version 1 or 2 and header_size 1024, as the header's first 16 bytes: where to look inside an archive
_HEADER_ANCHOR = re.compile(rb"[\x01\x02]\x00{7}\x00\x04\x00{6}")
_GZIP_MAGIC = b"\x1f\x8b"
_TAR_MAGIC_OFFSET = 257  # "ustar" in a tar header block
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:\.(\d+))?(?:[+%][-.\w/@]*)?")
# a compiler version inside a name: "neuronxcc-2.21.33363.0+82129205" (the Hugging Face / torch-neuronx
# compile caches), "neuroncc-2.4.0.21+b7621be18" (torch-neuronx's cache of neuronx-cc 2.4), "neuronx-cc-2.x"
_CC_IN_TEXT = re.compile(r"neuronx?-?cc-(\d+\.\d+\.\d+(?:\.\d+)?)")
_NEURON_CLASS = re.compile(rb"torch\.classes\.neuron[.\n]")  # the class path in code, the GLOBAL in a pickle
_NEURONX_CODE = re.compile(r"(?:^|/)code/__torch__/(?:torch_neuronx|neuronx_distributed)/")
_NEURON_CODE = re.compile(r"(?:^|/)code/__torch__/torch_neuron/")
_TENSOR_MEMBER = re.compile(r"(?:^|/)(data|constants)/(\d+)$")


@dataclass(frozen=True)
class ArtifactInfo:
    """What one compiled artifact says about the compiler that built it and the NEFF it carries."""

    path: str  # relative to the model dir ("1/model.pt")
    kind: str  # "neff" | "torchscript-neuronx" | "torchscript-neuron" | "unknown"
    compiler: str | None  # "neuronx-cc" | "neuron-cc" | None
    compiler_version: str | None  # "2.16.372.0": the dotted numbers, without "+<build hash>"
    neff_version: str | None  # "2.0"
    source: str  # how it was read ("NEFF header; compiler from info.json") or why not ("not found: ...")
    confidence: str = UNKNOWN  # "header" | "pattern" | "unknown": the weakest of what was reported


class _Exhausted(Exception):
    """A bound was reached: the rest of the file is not read."""


@dataclass(frozen=True)
class _Header:
    pkg_version: int
    data_size: int
    major: int
    minor: int
    build: str
    name: str


@dataclass(frozen=True)
class _Neff:
    """One NEFF read: its version, and the compiler version with where it came from."""

    neff_version: str
    compiler_version: str | None
    compiler_from: str  # "info.json", "the header's name" ... or why there is none
    confidence: str  # of the compiler version


class _Budget:
    """What is left to read from one artifact file, and to inflate from its NEFFs."""

    def __init__(self, read: int = MAX_READ, inflate: int = MAX_INFLATE) -> None:
        self.read = read
        self.inflate = inflate

    def take_read(self, n: int) -> None:
        if n > self.read:
            self.read = 0
            raise _Exhausted(f"the read bound ({MAX_READ // MIB} MiB of the file)")
        self.read -= n

    def take_inflate(self, n: int) -> None:
        if n > self.inflate:
            self.inflate = 0
            raise _Exhausted(f"the inflate bound ({MAX_INFLATE // MIB} MiB)")
        self.inflate -= n


class _CountedFile:
    """A binary file whose reads count against a budget (zipfile and tarfile read through it)."""

    def __init__(self, f: BinaryIO, size: int, budget: _Budget) -> None:
        self._f = f
        self._size = size
        self._budget = budget

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = max(0, self._size - self._f.tell())
        self._budget.take_read(n)
        return self._f.read(n)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def seekable(self) -> bool:
        return True


class _Window:
    """``length`` bytes of a file (or of bytes in memory) from ``start``, read sequentially; past ``limit``
    of them the read stops with :class:`_Exhausted` naming ``bound``."""

    def __init__(self, f: _CountedFile | io.BytesIO, start: int, length: int, limit: int, bound: str) -> None:
        self._f = f
        self._pos = start
        self._left = length
        self._limit = limit
        self._bound = bound

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = self._left
        n = min(n, self._left)
        if n > self._limit:
            if self._limit == 0:
                raise _Exhausted(self._bound)
            n = self._limit
        self._f.seek(self._pos)
        data = self._f.read(n)
        self._pos += len(data)
        self._left -= len(data)
        self._limit -= len(data)
        return data


class _Prefixed:
    """Bytes already read, then the rest of a stream."""

    def __init__(self, head: bytes, rest: _Window) -> None:
        self._head = head
        self._rest = rest

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            out, self._head = self._head + self._rest.read(), b""
            return out
        out, self._head = self._head[:n], self._head[n:]
        if len(out) < n:
            out += self._rest.read(n - len(out))
        return out


class _Inflater:
    """The inflated bytes of a gzip stream, each one counted against the budget."""

    def __init__(self, src: _Prefixed, budget: _Budget) -> None:
        self._src = src
        self._budget = budget
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing only

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = 1 << 16
        out = bytearray()
        while len(out) < n and not self._z.eof:
            want = n - len(out)
            if self._z.unconsumed_tail:
                chunk = self._z.decompress(self._z.unconsumed_tail, want)
            else:
                compressed = self._src.read(64 * 1024)
                if not compressed:
                    break  # truncated: tarfile reports the short read
                chunk = self._z.decompress(compressed, want)
            self._budget.take_inflate(len(chunk))
            out += chunk
        return bytes(out)


def _open(path: Path) -> BinaryIO:
    """The file, opened for reading (tests count what is read through here)."""
    return open(path, "rb")


def _numbers(version: str | None) -> tuple[int, ...]:
    """(2, 16, 372, 0) for "2.16.372.0+4a9b2326"; () for None or no number."""
    if not version:
        return ()
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+", 1)[0].split("%", 1)[0]))


def _plain_version(text: str) -> str | None:
    """The dotted numbers of a compiler version ("2.24.5133.0+58f8de22" -> "2.24.5133.0"), if it is one."""
    m = _VERSION.fullmatch(text.strip())
    if not m:
        return None
    return ".".join(g for g in m.groups() if g is not None)


def compiler_of(version: str | None) -> str | None:
    """Which compiler a version belongs to: neuron-cc is 1.x (Inf1), neuronx-cc 2.x and later."""
    numbers = _numbers(version)
    if not numbers or numbers[0] == 0:
        return None
    return NEURON_CC if numbers[0] == 1 else NEURONX_CC


def _text(field: bytes) -> str | None:
    """A NUL-terminated text field, or None when it is not printable ASCII."""
    raw = field.split(b"\x00", 1)[0]
    if any(b < 0x20 or b > 0x7E for b in raw):
        return None
    return raw.decode("ascii")


def parse_header(raw: bytes) -> tuple[_Header | None, str]:
    """The NEFF header at the start of ``raw``, or None and why it is not one."""
    if len(raw) < NEFF_HEADER_SIZE:
        return None, f"truncated NEFF header ({len(raw)} of {NEFF_HEADER_SIZE} bytes)"
    pkg_version, header_size, data_size, major, minor, build_raw = _HEADER_FIELDS.unpack_from(raw, 0)
    if pkg_version not in (1, 2):
        return None, f"not a NEFF header (pkg_version {pkg_version}, not 1 or 2)"
    if header_size != NEFF_HEADER_SIZE:
        return None, f"not a NEFF header (header_size {header_size}, not {NEFF_HEADER_SIZE})"
    if data_size == 0:
        return None, "not a NEFF header (data_size 0)"
    if major > 255 or minor > 65535:
        return None, f"not a NEFF header (implausible NEFF version {major}.{minor})"
    build = _text(build_raw)
    if build is None:
        return None, "not a NEFF header (neff_build_version is not text)"
    name = raw[_NAME_OFFSET:_NAME_OFFSET + _NAME_SIZE].split(b"\x00", 1)[0].decode("ascii", "replace")
    return _Header(pkg_version, data_size, major, minor, build, name), ""


def _info_json_version(data: bytes) -> tuple[str | None, str]:
    """``tool_version`` of a NEFF's info.json, or None and why."""
    try:
        info = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return None, f"info.json is not JSON ({type(e).__name__})"
    tool_version = info.get("tool_version") if isinstance(info, dict) else None
    if not isinstance(tool_version, str):
        return None, "info.json has no tool_version"
    version = _plain_version(tool_version)
    if version is None:
        return None, f"info.json tool_version {tool_version[:40]!r} is not a version"
    return version, "info.json"


def _tarball_kind(head: bytes) -> str | None:
    """"gzip" or "tar" for the first bytes of a NEFF's data, None for anything else."""
    if head[:2] == _GZIP_MAGIC:
        return "gzip"
    if head[_TAR_MAGIC_OFFSET:_TAR_MAGIC_OFFSET + 5] == b"ustar":
        return "tar"
    return None


def _tarball_version(payload: _Window, budget: _Budget) -> tuple[str | None, str]:
    """The compiler version from a NEFF tarball's info.json (gzip or plain tar), or None and why."""
    head = payload.read(512)
    src = _Prefixed(head, payload)
    stream: _Prefixed | _Inflater
    kind = _tarball_kind(head)
    if kind == "gzip":
        stream = _Inflater(src, budget)
    elif kind == "tar":
        stream = src
    else:
        return None, "the NEFF's data is neither gzip nor tar"
    try:
        with tarfile.open(fileobj=cast(BinaryIO, stream), mode="r|") as tar:
            for count, member in enumerate(tar):
                if count >= MAX_TAR_MEMBERS:
                    return None, f"no info.json in the first {MAX_TAR_MEMBERS} members of the NEFF's tarball"
                name = member.name
                while name.startswith("./"):
                    name = name[2:]
                if name.lstrip("/") != "info.json" or not member.isfile():
                    continue
                if member.size > MAX_INFO_JSON:
                    return None, f"info.json is larger than {MAX_INFO_JSON} bytes"
                handle = tar.extractfile(member)
                if handle is None:
                    return None, "info.json cannot be read"
                return _info_json_version(handle.read(MAX_INFO_JSON))
    except _Exhausted as e:
        return None, f"no info.json within {e}"
    except (tarfile.TarError, zlib.error, EOFError, OSError, ValueError) as e:
        return None, f"the NEFF's tarball is unreadable ({type(e).__name__}: {str(e)[:80]})"
    return None, "the NEFF's tarball has no info.json"


def _pattern_version(*texts: str) -> str | None:
    """A compiler version found by its "neuronx-cc-<version>" pattern in names or strings."""
    for text in texts:
        m = _CC_IN_TEXT.search(text)
        if m:
            return m.group(1)
    return None


def _read_neff(header: _Header, payload: _Window, budget: _Budget) -> _Neff:
    """The versions of one NEFF, from its header and (the first part of) its tarball."""
    neff_version = f"{header.major}.{header.minor}"
    version, why = _tarball_version(payload, budget)
    if version is not None:
        return _Neff(neff_version, version, "info.json", HEADER)
    found = _pattern_version(header.name, header.build)
    if found is not None:
        return _Neff(neff_version, found, f"a pattern in the header's name or build field ({why})", PATTERN)
    return _Neff(neff_version, None, why, UNKNOWN)


def _info(rel: str, kind: str, neff: _Neff | None, where: str, flavour_compiler: str | None = None,
          why: str = "") -> ArtifactInfo:
    """The result for one artifact; ``where`` prefixes the source ("torchscript data.pkl: ")."""
    if neff is None:
        return ArtifactInfo(rel, kind, flavour_compiler, None, None, f"{where}not found: {why}", UNKNOWN)
    version = neff.compiler_version
    if version is None:
        version = _pattern_version(rel)
        if version is not None:
            neff = _Neff(neff.neff_version, version, f"a pattern in the path ({neff.compiler_from})", PATTERN)
    compiler = compiler_of(version) or flavour_compiler
    if version is None:
        source = f"{where}NEFF header; no compiler version: {neff.compiler_from}"
    else:
        source = f"{where}NEFF header; compiler from {neff.compiler_from}"
    return ArtifactInfo(rel, kind, compiler, version, neff.neff_version, source,
                        HEADER if version is None else neff.confidence)


def _read_neff_file(f: _CountedFile, size: int, rel: str, budget: _Budget) -> ArtifactInfo:
    raw = f.read(min(size, NEFF_HEADER_SIZE))
    header, why = parse_header(raw)
    if header is None:
        return ArtifactInfo(rel, KIND_UNKNOWN, None, None, None, why, UNKNOWN)
    available = size - NEFF_HEADER_SIZE
    if header.data_size > available:
        why = f"truncated NEFF (data_size {header.data_size}, {available} bytes after the header)"
        return ArtifactInfo(rel, KIND_UNKNOWN, None, None, None, why, UNKNOWN)
    payload = _Window(f, NEFF_HEADER_SIZE, header.data_size, MAX_PAYLOAD,
                      f"the first {MAX_PAYLOAD // MIB} MiB of the NEFF's tarball")
    return _info(rel, KIND_NEFF, _read_neff(header, payload, budget), "")


def _zip_refusal(f: _CountedFile, size: int) -> str | None:
    """Why the zip's central directory is not read (too many entries, too large), or None."""
    tail_size = min(size, 22 + 65535)
    f.seek(size - tail_size)
    tail = f.read(tail_size)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + 22 > len(tail):
        return "a zip without an end of central directory record"
    _sig, _disk, _cd_disk, _n_disk, entries, cd_size, cd_offset, _comment = struct.unpack_from(
        "<4s4H2LH", tail, at)
    if entries == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:  # zip64: the numbers are elsewhere
        loc = at - 20
        if loc < 0 or tail[loc:loc + 4] != b"PK\x06\x07":
            return "a zip64 archive without its locator"
        (eocd64,) = struct.unpack_from("<Q", tail, loc + 8)
        if eocd64 + 56 > size:
            return "a zip64 archive with a bad locator"
        f.seek(eocd64)
        record = f.read(56)
        if record[:4] != b"PK\x06\x06":
            return "a zip64 archive without its end record"
        entries, cd_size = struct.unpack_from("<2Q", record, 32)
    if entries > MAX_ZIP_ENTRIES or cd_size > MAX_ZIP_DIRECTORY:
        return f"a zip with {entries} entries in a {cd_size}-byte directory (not read: too large)"
    return None


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of a member (inflated), and whether a bound cut them short."""
    out = bytearray()
    try:
        with zf.open(info) as handle:
            while len(out) < limit:
                chunk = handle.read(min(256 * 1024, limit - len(out)))
                if not chunk:
                    break
                out += chunk
    except _Exhausted:
        return bytes(out), True
    return bytes(out), False


def _neffs_in(buf: bytes, budget: _Budget) -> list[_Neff]:
    """Every NEFF whose header lies in ``buf`` (at most MAX_NEFFS); a NEFF running past the end of ``buf``
    is read as far as ``buf`` goes."""
    found: list[_Neff] = []
    data = io.BytesIO(buf)
    for m in _HEADER_ANCHOR.finditer(buf):
        header, _why = parse_header(buf[m.start():m.start() + NEFF_HEADER_SIZE])
        if header is None:
            continue
        start = m.start() + NEFF_HEADER_SIZE
        if _tarball_kind(buf[start:start + 512]) is None:  # header-like bytes, but no tarball after them
            continue
        limit = min(len(buf) - start, MAX_PAYLOAD)
        payload = _Window(data, start, header.data_size, limit, "the bytes of the NEFF in the part of the member read")
        found.append(_read_neff(header, payload, budget))
        if len(found) >= MAX_NEFFS:
            break
    return found


def _scan_order(infos: list[zipfile.ZipInfo]) -> list[zipfile.ZipInfo]:
    """The members that can hold a NEFF: data.pkl, then tensors and constants by number."""
    first, rest = [], []
    for info in infos:
        name = info.filename
        if name.endswith("/data.pkl") or name == "data.pkl":
            first.append(info)
        elif name.endswith("constants.pkl"):
            rest.append((2, 0, info))
        else:
            m = _TENSOR_MEMBER.search(name)
            if m:
                rest.append((1 if m.group(1) == "data" else 3, int(m.group(2)), info))
    rest.sort(key=lambda t: (t[0], t[1]))
    return (first + [t[2] for t in rest])[:MAX_MEMBERS_READ]


def _neuron_flavour(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> tuple[str, bool]:
    """The kind the member names give, and whether the archive refers to the Neuron model class at all
    (by those names, or in its TorchScript code)."""
    names = [i.filename for i in infos]
    if any(_NEURONX_CODE.search(n) for n in names):
        return KIND_NEURONX, True
    if any(_NEURON_CODE.search(n) for n in names):
        return KIND_NEURON, True
    code = [i for i in infos if f"/{i.filename}".find("/code/") >= 0 and i.filename.endswith(".py")]
    for info in code[:MAX_CODE_MEMBERS]:
        text, _cut = _read_member(zf, info, MAX_CODE_SCAN)
        if _NEURON_CLASS.search(text):
            return KIND_UNKNOWN, True
    return KIND_UNKNOWN, False


def _read_torchscript(f: _CountedFile, size: int, rel: str, budget: _Budget) -> ArtifactInfo:
    refusal = _zip_refusal(f, size)
    if refusal is not None:
        return ArtifactInfo(rel, KIND_UNKNOWN, None, None, None, refusal, UNKNOWN)
    f.seek(0)
    with zipfile.ZipFile(cast(BinaryIO, f)) as zf:
        infos = zf.infolist()
        kind, neuron = _neuron_flavour(zf, infos)
        flavour_compiler = {KIND_NEURONX: NEURONX_CC, KIND_NEURON: NEURON_CC}.get(kind)
        found: list[tuple[str, _Neff]] = []
        cut = False
        for info in _scan_order(infos):
            buf, cut = _read_member(zf, info, MAX_MEMBER_SCAN)
            member = info.filename.split("/", 1)[-1]
            if not neuron:  # only the pickled model can still say it is a Neuron one
                if member != "data.pkl" or not _NEURON_CLASS.search(buf):
                    break
                neuron = True
            found += [(member, n) for n in _neffs_in(buf, budget)]
            if cut or len(found) >= MAX_NEFFS:
                break
        if not neuron:
            return ArtifactInfo(rel, KIND_UNKNOWN, None, None, None,
                                "a zip archive without Neuron members (no torch_neuronx or torch_neuron code, "
                                "no torch.classes.neuron)", UNKNOWN)
        if not found:
            bound = "the read bound" if cut else f"the first {MAX_MEMBER_SCAN // MIB} MiB of each member"
            why = f"a Neuron TorchScript archive, but no NEFF header within {bound}"
            return _info(rel, kind, None, "torchscript: ", flavour_compiler, why)
        member, neff = max(found, key=lambda t: (_numbers(t[1].compiler_version), _numbers(t[1].neff_version)))
        if kind == KIND_UNKNOWN:  # the Neuron class used from another package: the compiler tells which
            kind = {NEURONX_CC: KIND_NEURONX, NEURON_CC: KIND_NEURON}.get(compiler_of(neff.compiler_version) or "",
                                                                          KIND_UNKNOWN)
        return _info(rel, kind, neff, f"torchscript {member}: ", flavour_compiler)


def read_artifact(path: Path, rel: str) -> ArtifactInfo:
    """What the artifact at ``path`` (``rel`` relative to the model dir) says about its compiler and NEFF.

    Reads at most ``MAX_READ`` bytes of the file; never raises for what the file holds."""
    budget = _Budget()
    try:
        st = os.stat(path, follow_symlinks=False)
        if not os.path.isfile(path) or os.path.islink(path):
            return ArtifactInfo(rel, KIND_UNKNOWN, None, None, None, "not a regular file", UNKNOWN)
        size = st.st_size
        with _open(path) as raw:
            f = _CountedFile(raw, size, budget)
            magic = f.read(min(size, 4))
            f.seek(0)
            if magic == b"PK\x03\x04":
                return _read_torchscript(f, size, rel, budget)
            if size < NEFF_HEADER_SIZE and not rel.lower().endswith(".neff"):
                return ArtifactInfo(rel, KIND_UNKNOWN, None, None, None,
                                    "neither a NEFF nor a zip archive (too short)", UNKNOWN)
            info = _read_neff_file(f, size, rel, budget)
            if info.kind == KIND_UNKNOWN and not rel.lower().endswith(".neff"):
                return ArtifactInfo(rel, KIND_UNKNOWN, None, None, None,
                                    f"neither a NEFF nor a zip archive ({info.source})", UNKNOWN)
            return info
    except _Exhausted as e:
        return ArtifactInfo(rel, KIND_UNKNOWN, None, None, None, f"not read past {e}", UNKNOWN)
    except Exception as e:  # OSError, BadZipFile, ... : a malformed file must not stop the switch with a traceback
        return ArtifactInfo(rel, KIND_UNKNOWN, None, None, None,
                            f"unreadable ({type(e).__name__}: {str(e)[:100]})", UNKNOWN)


def _artifact_paths(model_dir: Path) -> tuple[list[Path], Path | None]:
    """Artifact files under the model's numeric version dirs (sorted, no links followed), at most
    MAX_ARTIFACTS, and the first one left out (None when none was)."""
    found: list[Path] = []
    visited = 0
    try:
        versions = sorted((d for d in model_dir.iterdir() if d.name.isdigit() and not d.is_symlink() and d.is_dir()),
                          key=lambda d: int(d.name))
    except OSError:
        return [], None
    for version in versions:
        for top, dirs, files in os.walk(version, followlinks=False):
            dirs.sort()
            visited += len(dirs) + len(files)
            for name in sorted(files):
                path = Path(top) / name
                if not name.lower().endswith(ARTIFACT_SUFFIXES) or path.is_symlink():
                    continue
                if len(found) >= MAX_ARTIFACTS:
                    return found, path
                found.append(path)
            if visited > MAX_WALK:
                return found, None
    return found, None


def scan_model(model_dir: Path) -> list[ArtifactInfo]:
    """Every artifact (``*.neff``, ``*.pt``, ``*.pth``, ``*.ts``, ``*.torchscript``) under the model's
    version dirs (``1/``, ``2/`` ...), read; paths relative to ``model_dir``. At most MAX_ARTIFACTS are
    read; when more exist, one more entry (kind "unknown") names the first left out."""
    model_dir = Path(model_dir)
    paths, left_out = _artifact_paths(model_dir)
    infos = [read_artifact(p, p.relative_to(model_dir).as_posix()) for p in paths]
    if left_out is not None:
        infos.append(ArtifactInfo(left_out.relative_to(model_dir).as_posix(), KIND_UNKNOWN, None, None, None,
                                  f"not read: a model scan reads at most {MAX_ARTIFACTS} artifacts", UNKNOWN))
    return infos


def summarize(infos: Iterable[ArtifactInfo]) -> ArtifactInfo | None:
    """The model's strictest artifact: the newest compiler version, then the highest NEFF version (the first
    such in scan order); None when no artifact told either."""
    told = [i for i in infos if i.compiler_version or i.neff_version]
    if not told:
        return None
    return max(told, key=lambda i: (_numbers(i.compiler_version), _numbers(i.neff_version)))
