"""The compiler and NEFF versions read from a model's artifacts (tritonfleet/agent/artifacts.py), against
the sandbox's stand-ins (tritonfleet/sandbox/neffgen.py) and crafted bytes: round trips per kind, the
header's layout at literal offsets, broken headers and archives, the read bounds (a huge sparse file, a
bomb-like member), scan_model over version dirs, summarize."""

from __future__ import annotations

import ast
import gzip
import io
import json
import os
import struct
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from tritonfleet.agent import artifacts
from tritonfleet.agent.artifacts import ArtifactInfo, compiler_of, read_artifact, scan_model, summarize
from tritonfleet.sandbox import neffgen

GIB = 1 << 30


class _Counting:
    """A file whose reads are counted (artifacts._open is replaced by this in the ``reads`` fixture)."""

    def __init__(self, f, tally):
        self._f = f
        self._tally = tally

    def read(self, n=-1):
        data = self._f.read(n)
        self._tally["bytes"] += len(data)
        return data

    def seek(self, *args):
        return self._f.seek(*args)

    def tell(self):
        return self._f.tell()

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture
def reads(monkeypatch):
    """{"bytes": n}: everything read from artifact files while the test runs."""
    tally = {"bytes": 0}
    real = artifacts._open
    monkeypatch.setattr(artifacts, "_open", lambda path: _Counting(real(path), tally))
    return tally


def read(path: Path, rel: str | None = None) -> ArtifactInfo:
    return read_artifact(path, rel if rel is not None else path.name)


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def tarball(members: list[tuple[str, bytes]], compress: bool = True) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name.rstrip("/"))
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0) if compress else raw.getvalue()


def neff_with(data: bytes, neff_version: str = "2.0", **header) -> bytes:
    return neffgen.neff_header(data, neff_version, **header) + data


def zip_bytes(members: dict[str, bytes], deflate: bool = False) -> bytes:
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return raw.getvalue()


# --- round trips through the stand-ins ----------------------------------------------------------------------

@pytest.mark.parametrize("writer, name, compiler_version, neff_version, kind, compiler, where", [
    (neffgen.write_neff, "model.neff", "2.16.372.0", "2.0", "neff", "neuronx-cc", ""),
    (neffgen.write_neff, "graph.neff", "2.24.5133.0+58f8de22", "2.1", "neff", "neuronx-cc", ""),
    (neffgen.write_neff, "inf1.neff", "1.24.0.0", "1.0", "neff", "neuron-cc", ""),
    (neffgen.write_torchscript_neuronx, "model.pt", "2.21.33363.0", "2.0", "torchscript-neuronx", "neuronx-cc",
     "torchscript data.pkl: "),
    (neffgen.write_torchscript_neuronx, "model.torchscript", "2.19.1.0", "1.0", "torchscript-neuronx",
     "neuronx-cc", "torchscript data.pkl: "),
    (neffgen.write_torchscript_neuron, "model.pth", "1.19.2.0", "1.0", "torchscript-neuron", "neuron-cc",
     "torchscript data.pkl: "),
    (neffgen.write_torchscript_neuron, "model.ts", "1.24.0.0", "0.6", "torchscript-neuron", "neuron-cc",
     "torchscript data.pkl: "),
])
def test_round_trip(tmp_path, reads, writer, name, compiler_version, neff_version, kind, compiler, where):
    path = writer(tmp_path / "1" / name, compiler_version, neff_version)
    info = read_artifact(path, f"1/{name}")
    assert info == ArtifactInfo(f"1/{name}", kind, compiler, compiler_version.split("+")[0], neff_version,
                                f"{where}NEFF header; compiler from info.json", "header")
    assert 0 < reads["bytes"] <= path.stat().st_size + 64 * 1024


def test_the_stand_ins_are_deterministic(tmp_path):
    assert neffgen.neff_bytes("2.16.372.0") == neffgen.neff_bytes("2.16.372.0")
    assert neffgen.neff_bytes("2.16.372.0") != neffgen.neff_bytes("2.16.373.0")
    a = neffgen.write_torchscript_neuronx(tmp_path / "a" / "model.pt", "2.16.372.0").read_bytes()
    b = neffgen.write_torchscript_neuronx(tmp_path / "b" / "model.pt", "2.16.372.0").read_bytes()
    assert a == b


def test_the_stand_in_neff_has_the_documented_header_layout():
    """The offsets of neff_header_t (docs/compatibility-artifacts.md), read here with literal numbers."""
    raw = neffgen.neff_bytes("2.16.372.0", "2.1", name="resnet50", build_version="2.0.21884.0%kaena")
    assert struct.unpack_from("<5Q", raw, 0) == (2, 1024, len(raw) - 1024, 2, 1)
    assert raw[40:168].rstrip(b"\0") == b"2.0.21884.0%kaena"  # neff_build_version[128]
    assert struct.unpack_from("<I", raw, 168) == (1,)  # num_tpb
    assert raw[220:476].rstrip(b"\0") == b"resnet50"  # name[256]
    assert struct.unpack_from("<I", raw, 476) == (1,)  # requested_tpb_count
    assert struct.unpack_from("<QI", raw, 544) == (0, 1)  # feature_bits, lnc_size
    assert raw[556:1024] == bytes(468)  # pad
    assert raw[1024:1026] == b"\x1f\x8b"  # the gzip tarball right after the header
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(raw[1024:]))) as tar:
        names = tar.getnames()
        info = tar.extractfile("info.json")
        assert info is not None and json.load(info) == {"tool_version": "2.16.372.0"}
    assert {"info.json", "neff.json", "kelf-0.json", "sg00", "sg00/def.json"} <= set(names)


@pytest.mark.parametrize("writer, code", [
    (neffgen.torchscript_neuronx_bytes, "torch_neuronx/xla_impl/trace.py"),
    (neffgen.torchscript_neuron_bytes, "torch_neuron/decorators.py"),
])
def test_the_stand_in_archive_has_torch_jit_saves_layout(writer, code):
    data = writer("2.16.372.0", "2.0", stem="resnet", extra_files={"meta.json": b"{}"})
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
        assert names[0] == "resnet/extra/meta.json"
        assert {"resnet/data.pkl", f"resnet/code/__torch__/{code}", "resnet/constants.pkl", "resnet/version",
                "resnet/byteorder"} <= set(names)
        assert all(n.startswith("resnet/") for n in names)
        pkl = zf.read("resnet/data.pkl")
        assert b"__torch__.torch.classes.neuron\nModel\n" in pkl
        assert b"model : __torch__.torch.classes.neuron.Model" in zf.read(f"resnet/code/__torch__/{code}")
    neff = neffgen.neff_bytes("2.16.372.0", "2.0")
    at = pkl.index(neff)  # the whole NEFF as a pickle string: BINUNICODE, length, the raw bytes
    assert pkl[at - 5:at] == b"X" + struct.pack("<I", len(neff))
    assert pkl.startswith(b"\x80\x02") and pkl.endswith(b".")


# --- the reader on crafted bytes -------------------------------------------------------------------------

GOOD = tarball([("info.json", b'{"tool_version": "2.16.372.0+4a9b2326"}')])


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


def _patch(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new):]


NEFF_CASES = [
    # (name, bytes, kind, neff_version, compiler_version, confidence, source says)
    ("empty", b"", "unknown", None, None, "unknown", "truncated NEFF header (0 of 1024 bytes)"),
    ("truncated header", neff_with(GOOD)[:500], "unknown", None, None, "unknown",
     "truncated NEFF header (500 of 1024 bytes)"),
    ("wrong pkg_version", neff_with(GOOD, pkg_version=7), "unknown", None, None, "unknown", "pkg_version 7"),
    ("pkg_version 0", neff_with(GOOD, pkg_version=0), "unknown", None, None, "unknown", "pkg_version 0"),
    ("wrong header_size", neff_with(GOOD, header_size=512), "unknown", None, None, "unknown", "header_size 512"),
    ("data_size 0", neff_with(GOOD, data_size=0), "unknown", None, None, "unknown", "data_size 0"),
    ("data past the end", neff_with(GOOD, data_size=len(GOOD) + 1), "unknown", None, None, "unknown",
     "truncated NEFF"),
    ("build field not text", _flip(neff_with(GOOD, build_version="2.0"), 41), "unknown", None, None, "unknown",
     "not text"),
    ("implausible version", neff_with(GOOD, "300.0"), "unknown", None, None, "unknown", "implausible"),
    ("good", neff_with(GOOD), "neff", "2.0", "2.16.372.0", "header", "compiler from info.json"),
    ("NEFF 1.0", neff_with(GOOD, "1.0"), "neff", "1.0", "2.16.372.0", "header", "info.json"),
    ("plain tar (pkg 1)", neff_with(tarball([("./info.json", b'{"tool_version": "2.5.0.0"}')], compress=False),
                                    pkg_version=1),
     "neff", "2.0", "2.5.0.0", "header", "compiler from info.json"),
    ("neither gzip nor tar", neff_with(b"\0" * 2048), "neff", "2.0", None, "header", "neither gzip nor tar"),
    ("corrupt gzip", neff_with(_flip(GOOD, 40)), "neff", "2.0", None, "header", "unreadable"),
    ("no info.json", neff_with(tarball([("neff.json", b"{}")])), "neff", "2.0", None, "header", "no info.json"),
    ("info.json not JSON", neff_with(tarball([("info.json", b"{not json")])), "neff", "2.0", None, "header",
     "not JSON"),
    ("no tool_version", neff_with(tarball([("info.json", b'{"tool": "x"}')])), "neff", "2.0", None, "header",
     "no tool_version"),
    ("tool_version not a version", neff_with(tarball([("info.json", b'{"tool_version": "develop"}')])),
     "neff", "2.0", None, "header", "is not a version"),
    ("info.json a directory", neff_with(tarball([("info.json/", b"")])), "neff", "2.0", None, "header",
     "no info.json"),
    ("version in the name", neff_with(tarball([("neff.json", b"{}")]),
                                      name="cache/USER_neuroncc-2.4.0.21+b7621be18/MODULE_0/graph"),
     "neff", "2.0", "2.4.0.21", "pattern", "a pattern in the header's name or build field"),
    # the uuid (204-219) ending in zero bytes right before the name (220-475): the name's offset exactly
    ("version at the start of the name",
     _patch(neff_with(tarball([("neff.json", b"{}")]), name="neuronxcc-2.3.0.0"), 216, bytes(4)),
     "neff", "2.0", "2.3.0.0", "pattern", "pattern"),
    ("version in the build field", neff_with(tarball([("neff.json", b"{}")]), build_version="neuronx-cc-2.9.1.0"),
     "neff", "2.0", "2.9.1.0", "pattern", "pattern"),
    ("a tools build string is not a compiler version",
     neff_with(tarball([("neff.json", b"{}")]), build_version="2.0.21884.0%kaena-tools/develop@6c66f4b"),
     "neff", "2.0", None, "header", "no compiler version"),
]


@pytest.mark.parametrize("name, data, kind, neff_version, compiler_version, confidence, says", NEFF_CASES,
                         ids=[c[0] for c in NEFF_CASES])
def test_neff_files(tmp_path, name, data, kind, neff_version, compiler_version, confidence, says):
    info = read(write(tmp_path / "model.neff", data))
    assert (info.kind, info.neff_version, info.compiler_version, info.confidence) == \
        (kind, neff_version, compiler_version, confidence), info
    assert says in info.source, info
    assert info.compiler == compiler_of(compiler_version)


def test_a_compiler_version_in_the_path(tmp_path):
    """The Hugging Face / torch-neuronx compile cache names a NEFF's directory after its compiler."""
    rel = "1/neuronxcc-2.21.33363.0+82129205/MODULE_fef9240b8fbfaca895ba+a02c3a36/model.neff"
    info = read(write(tmp_path / rel, neff_with(tarball([("neff.json", b"{}")]))), rel)
    assert (info.compiler, info.compiler_version, info.confidence) == ("neuronx-cc", "2.21.33363.0", "pattern")
    assert "a pattern in the path" in info.source


OTHER_CASES = [
    ("random bytes", "model.pt", os.urandom(4096), "neither a NEFF nor a zip archive"),
    ("short", "model.pt", b"\x80\x02}q\x00.", "neither a NEFF nor a zip archive (too short)"),
    ("a legacy torch.save pickle", "model.pth", b"\x80\x02" + b"\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19." * 100,
     "neither a NEFF nor a zip archive"),
    ("truncated zip", "model.pt", neffgen.torchscript_neuronx_bytes("2.16.372.0")[:700],
     "a zip without an end of central directory record"),
    ("plain TorchScript", "model.pt", zip_bytes({
        "model/data.pkl": b"\x80\x02c__torch__.torch.nn.modules.linear\nLinear\nq\x00)\x81}b.",
        "model/code/__torch__/torch/nn/modules/linear.py": b"class Linear(Module):\n  pass\n",
        "model/data/0": bytes(64), "model/version": b"3\n"}), "without Neuron members"),
    ("a state dict", "model.pt", zip_bytes({"archive/data.pkl": b"\x80\x02}q\x00.", "archive/data/0": bytes(8)}),
     "without Neuron members"),
]


@pytest.mark.parametrize("name, filename, data, says", OTHER_CASES, ids=[c[0] for c in OTHER_CASES])
def test_other_files_are_unknown(tmp_path, name, filename, data, says):
    info = read(write(tmp_path / filename, data))
    assert (info.kind, info.compiler, info.compiler_version, info.neff_version, info.confidence) == \
        ("unknown", None, None, None, "unknown"), info
    assert says in info.source, info


def test_a_neuronx_archive_without_its_neff(tmp_path):
    data = neffgen.torchscript_neuronx_bytes("2.16.372.0", neff=b"not a NEFF at all")
    info = read(write(tmp_path / "model.pt", data))
    assert info == ArtifactInfo("model.pt", "torchscript-neuronx", "neuronx-cc", None, None,
                                "torchscript: not found: a Neuron TorchScript archive, but no NEFF header within "
                                "the first 4 MiB of each member", "unknown")


def test_the_neuron_class_in_another_package(tmp_path):
    """No torch_neuronx code member: the pickled torch.classes.neuron.Model says it is a Neuron model, the
    compiler version which framework."""
    neff = neffgen.neff_bytes("2.16.372.0")
    pkl = b"\x80\x02cmypkg.wrapper\nWrapper\nq\x00)\x81}(X\x05\x00\x00\x00modelc__torch__.torch.classes.neuron\n" \
          b"Model\n)\x81X" + struct.pack("<I", len(neff)) + neff + b"\x85bub."
    info = read(write(tmp_path / "model.pt", zip_bytes({"m/data.pkl": pkl, "m/code/__torch__/mypkg/w.py": b""})))
    assert (info.kind, info.compiler, info.compiler_version, info.neff_version) == \
        ("torchscript-neuronx", "neuronx-cc", "2.16.372.0", "2.0")


def test_the_strictest_of_several_neffs_in_one_archive(tmp_path):
    neffs = [neffgen.neff_bytes(v, n) for v, n in (("2.16.372.0", "2.0"), ("2.21.1.0", "2.0"), ("2.19.0.0", "2.1"))]
    pkl = b"\x80\x02c__torch__.torch.classes.neuron\nModel\n" + b"".join(b"X" + struct.pack("<I", len(n)) + n
                                                                       for n in neffs) + b"."
    members = {"m/data.pkl": pkl, "m/code/__torch__/neuronx_distributed/trace/model.py": b""}
    info = read(write(tmp_path / "model.pt", zip_bytes(members, deflate=True)))
    assert (info.kind, info.compiler_version, info.neff_version) == ("torchscript-neuronx", "2.21.1.0", "2.0")


def test_header_like_bytes_without_a_tarball_are_no_neff(tmp_path):
    """Bytes that look like a NEFF header (in tensor data, say) but are not followed by a gzip or tar
    stream are skipped; a real NEFF after them is read."""
    fake = neffgen.neff_header(b"x" * 4096, "9.9") + os.urandom(4096)
    members = {"m/code/__torch__/torch_neuronx/xla_impl/trace.py": b"", "m/data.pkl": b"torch.classes.neuron\n" + fake}
    info = read(write(tmp_path / "fake.pt", zip_bytes(members)))
    assert (info.kind, info.neff_version, info.compiler_version) == ("torchscript-neuronx", None, None), info
    members["m/data.pkl"] += neffgen.neff_bytes("2.16.372.0", "2.0")
    info = read(write(tmp_path / "real.pt", zip_bytes(members)))
    assert (info.neff_version, info.compiler_version) == ("2.0", "2.16.372.0"), info


def test_a_neff_in_a_tensor_member(tmp_path):
    """The NEFF stored as a uint8 tensor (data/0) rather than as a pickled string is found too."""
    members = {"m/data.pkl": b"\x80\x02c__torch__.torch_neuron.decorators\nNeuronModuleV2\n.",
               "m/code/__torch__/torch_neuron/decorators.py": b"", "m/data/0": neffgen.neff_bytes("1.19.2.0", "1.0")}
    info = read(write(tmp_path / "model.pt", zip_bytes(members)))
    assert (info.kind, info.compiler, info.compiler_version, info.neff_version) == \
        ("torchscript-neuron", "neuron-cc", "1.19.2.0", "1.0")
    assert info.source.startswith("torchscript data/0: ")


def test_zip_directories_too_large_are_not_read(tmp_path, reads):
    eocd = b"PK\x05\x06" + struct.pack("<4H2LH", 0, 0, 60000, 60000, 50 * 1024 * 1024, 100, 0)
    info = read(write(tmp_path / "model.pt", b"PK\x03\x04" + bytes(200) + eocd))
    assert info.kind == "unknown" and "not read: too large" in info.source, info
    # the zip64 records: the locator, then the end record it points to
    record = b"PK\x06\x06" + struct.pack("<QHHLL4Q", 44, 45, 45, 0, 0, 10**6, 10**6, 10**8, 300)
    locator = b"PK\x06\x07" + struct.pack("<LQL", 0, 300, 1)
    eocd = b"PK\x05\x06" + struct.pack("<4H2LH", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    data = b"PK\x03\x04" + bytes(296) + record + locator + eocd
    info = read(write(tmp_path / "big.pt", data))
    assert info.kind == "unknown" and "1000000 entries" in info.source, info
    assert reads["bytes"] < 200 * 1024


def test_what_is_not_a_regular_file(tmp_path):
    (tmp_path / "dir.pt").mkdir()
    assert read(tmp_path / "dir.pt").source == "not a regular file"
    (tmp_path / "link.neff").symlink_to(neffgen.write_neff(tmp_path / "real.neff", "2.16.372.0"))
    assert read(tmp_path / "link.neff").source == "not a regular file"
    info = read(tmp_path / "missing.neff")
    assert info.kind == "unknown" and info.source.startswith("unreadable (FileNotFoundError"), info


# --- bounds ----------------------------------------------------------------------------------------------

def test_a_huge_neff_is_read_only_at_its_start(tmp_path, reads):
    """A 3 GiB (sparse) NEFF whose info.json lies behind 64 MiB of weights: the header is read, the tarball
    only up to the inflate bound, the file's bytes up to the read bound."""
    data = neffgen.neff_tarball("2.16.372.0", padding=64 * 1024 * 1024)
    path = tmp_path / "model.neff"
    with open(path, "wb") as f:
        f.write(neffgen.neff_header(data, "2.0", data_size=3 * GIB - 1024))
        f.write(data)
        f.truncate(3 * GIB)
    started = time.monotonic()
    info = read(path)
    assert (info.kind, info.neff_version, info.compiler_version) == ("neff", "2.0", None), info
    assert "no info.json within the inflate bound (32 MiB)" in info.source
    assert reads["bytes"] <= artifacts.MAX_READ
    assert time.monotonic() - started < 20
    # the same tarball without the weights: info.json is found
    assert read(write(tmp_path / "small.neff", neffgen.neff_bytes("2.16.372.0"))).compiler_version == "2.16.372.0"


def test_a_huge_plain_tar_member_is_not_read_through(tmp_path, reads):
    """A plain-tar NEFF whose first member claims 2 GiB: the tarball is read up to its bound, not further."""
    member = tarfile.TarInfo("sg00/weights.bin")
    member.size = 2 * GIB
    head = member.tobuf(tarfile.GNU_FORMAT)
    path = tmp_path / "model.neff"
    with open(path, "wb") as f:
        f.write(neffgen.neff_header(head, "2.0", pkg_version=1, data_size=3 * GIB))
        f.write(head)
        f.truncate(3 * GIB + 1024)
    info = read(path)
    assert (info.kind, info.neff_version, info.compiler_version) == ("neff", "2.0", None), info
    assert "no info.json within the first 4 MiB of the NEFF's tarball" in info.source
    assert reads["bytes"] <= artifacts.MAX_PAYLOAD + 2048


def test_a_bomb_like_member_is_not_read_through(tmp_path, reads):
    """data.pkl inflates to 64 MiB of zeros before its NEFF: only its first MAX_MEMBER_SCAN bytes are
    searched, so the NEFF behind them is not found (and the archive is small: little is read)."""
    neff = neffgen.neff_bytes("2.16.372.0")
    pkl = b"\x80\x02c__torch__.torch.classes.neuron\nModel\n" + bytes(64 * 1024 * 1024) + neff
    members = {"m/code/__torch__/torch_neuronx/xla_impl/trace.py": b"", "m/data.pkl": pkl}
    path = write(tmp_path / "model.pt", zip_bytes(members, deflate=True))
    assert path.stat().st_size < 1024 * 1024
    started = time.monotonic()
    info = read(path)
    assert (info.kind, info.neff_version, info.compiler_version) == ("torchscript-neuronx", None, None), info
    assert "no NEFF header within the first 4 MiB" in info.source
    assert time.monotonic() - started < 10
    # the same NEFF right at the start of data.pkl is found
    members["m/data.pkl"] = pkl.replace(bytes(64 * 1024 * 1024), b"")
    assert read(write(tmp_path / "ok.pt", zip_bytes(members, deflate=True))).compiler_version == "2.16.372.0"


def test_a_neff_past_the_member_bound_inside_an_archive(tmp_path):
    """A NEFF that starts inside the scanned part of data.pkl but whose info.json lies past it: the NEFF
    version is read, the compiler version is not (and the source says why)."""
    neff = neffgen.neff_bytes("2.16.372.0", padding=8 * 1024 * 1024)  # compresses well: weights of zeros
    pkl = b"\x80\x02c__torch__.torch.classes.neuron\nModel\n" + bytes(artifacts.MAX_MEMBER_SCAN - 2000) + neff
    members = {"m/code/__torch__/torch_neuronx/xla_impl/trace.py": b"", "m/data.pkl": pkl}
    info = read(write(tmp_path / "model.pt", zip_bytes(members, deflate=True)))
    assert (info.neff_version, info.compiler_version) == ("2.0", None), info
    assert "the part of the member read" in info.source


# --- scan_model and summarize ----------------------------------------------------------------------------

def test_scan_model_reads_every_artifact_of_every_version(tmp_path):
    model = tmp_path / "resnet50"
    neffgen.write_torchscript_neuronx(model / "1" / "model.pt", "2.16.372.0", "2.0")
    neffgen.write_torchscript_neuronx(model / "2" / "model.pt", "2.21.33363.0", "2.0")
    neffgen.write_neff(model / "2" / "neffs" / "encoder.neff", "2.19.1.0", "2.1")
    write(model / "2" / "model.py", b"# python backend\n")
    write(model / "2" / "notes.txt", b"")
    write(model / "config.pbtxt", b'backend: "python"\n')
    neffgen.write_neff(model / "labels" / "stray.neff", "2.30.0.0")  # not a version dir
    neffgen.write_neff(tmp_path / "elsewhere" / "9" / "x.neff", "2.30.0.0")
    (model / "10").symlink_to(tmp_path / "elsewhere" / "9")  # a linked version dir is not followed
    (model / "2" / "link.neff").symlink_to(tmp_path / "elsewhere" / "9" / "x.neff")
    infos = scan_model(model)
    assert [(i.path, i.kind, i.compiler_version, i.neff_version) for i in infos] == [
        ("1/model.pt", "torchscript-neuronx", "2.16.372.0", "2.0"),
        ("2/model.pt", "torchscript-neuronx", "2.21.33363.0", "2.0"),
        ("2/neffs/encoder.neff", "neff", "2.19.1.0", "2.1"),
    ]
    assert summarize(infos) == infos[1]
    assert scan_model(tmp_path / "absent") == []
    assert summarize(scan_model(tmp_path / "elsewhere")) is not None


def test_scan_model_is_bounded_in_count(tmp_path, monkeypatch):
    monkeypatch.setattr(artifacts, "MAX_ARTIFACTS", 3)
    for n in range(5):
        neffgen.write_neff(tmp_path / "m" / "1" / f"part{n}.neff", f"2.{n}.0.0")
    infos = scan_model(tmp_path / "m")
    assert [i.path for i in infos] == ["1/part0.neff", "1/part1.neff", "1/part2.neff", "1/part3.neff"]
    assert [i.compiler_version for i in infos] == ["2.0.0.0", "2.1.0.0", "2.2.0.0", None]
    assert infos[-1].source == "not read: a model scan reads at most 3 artifacts"


def _a(path, compiler_version=None, neff_version=None, kind="neff"):
    return ArtifactInfo(path, kind, compiler_of(compiler_version), compiler_version, neff_version, "", "header")


@pytest.mark.parametrize("infos, strictest", [
    ([], None),
    ([ArtifactInfo("a", "unknown", None, None, None, "not found", "unknown")], None),
    ([_a("a", "2.16.372.0", "2.0"), _a("b", "2.21.1.0", "2.0"), _a("c", "2.19.0.0", "2.1")], "b"),
    ([_a("a", "2.9.0.0", "2.0"), _a("b", "2.10.0.0", "2.0")], "b"),  # numbers, not strings
    ([_a("a", "2.16.372.0", "2.0"), _a("b", "2.16.372.0", "2.1")], "b"),  # same compiler: the higher NEFF
    ([_a("a", "2.16.372.0", "2.1"), _a("b", "2.16.372.0", "2.1")], "a"),  # a tie: the first
    ([_a("a", None, "2.1"), _a("b", "2.5.0.0", "1.0")], "b"),  # a compiler version beats none
    ([_a("a", None, "1.0"), _a("b", None, "2.0")], "b"),
    ([_a("a", "1.24.0.0", "1.0"), _a("b", "2.4.0.21", "1.0")], "b"),
])
def test_summarize_picks_the_strictest(infos, strictest):
    result = summarize(infos)
    assert (result.path if result else None) == strictest


@pytest.mark.parametrize("version, compiler", [
    ("2.16.372.0", "neuronx-cc"), ("2.24.5133.0+58f8de22", "neuronx-cc"), ("3.0.0.0", "neuronx-cc"),
    ("1.24.0.0", "neuron-cc"), ("1.0.6632.0+6001610955", "neuron-cc"), ("0.6", None), (None, None), ("", None),
])
def test_compiler_of(version, compiler):
    assert compiler_of(version) == compiler


def test_the_reader_executes_nothing():
    """No pickle, no torch, no subprocess, no eval: the artifacts are read as bytes."""
    tree = ast.parse(Path(artifacts.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"pickle", "cPickle", "torch", "subprocess", "shelve", "marshal", "numpy"}, imported
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not called & {"eval", "exec", "compile", "__import__"}
