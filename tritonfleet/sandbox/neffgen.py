"""Stand-in compiled Neuron models for the sandbox: a NEFF file, and TorchScript archives as torch-neuronx
and torch-neuron save them, each saying "compiled by neuronx-cc X, NEFF version Y" where real artifacts say
it (docs/compatibility-artifacts.md has the layouts and their sources):

* NEFF: the documented 1024-byte ``neff_header_t`` (``pkg_version`` 2, ``header_size`` 1024, ``data_size``,
  NEFF major/minor, build version, ``num_tpb``, an MD5 of the data, a UUID, the name ...), then a gzip
  tarball (GNU tar, as libnrt's own NEFF has) whose ``info.json`` carries ``tool_version``: the compiler
  version Neuron's tools read. The tarball's other members (``neff.json``, ``kelf-0.json``, ``sg00/``) are
  named as ``neuron-packager unpack`` lists them; their contents are placeholders.
* TorchScript: a zip with the member layout ``torch.jit.save`` writes (``<stem>/data.pkl``,
  ``<stem>/code/__torch__/...py``, ``constants.pkl``, ``version``, ``byteorder``, ``extra/...``). The code
  is under ``torch_neuronx/xla_impl/trace.py`` (torch-neuronx's ``NeuronModule``) or
  ``torch_neuron/decorators.py`` (torch-neuron's ``AwsNeuronGraphModule`` / ``NeuronModuleV2``), and
  ``data.pkl`` pickles a ``torch.classes.neuron.Model`` whose state holds the NEFF's bytes as a pickle
  string. The exact state torch-neuron(x) pickles for that class is not published; the stand-in's
  ``(neff, metaneff)`` pair is an assumption, and nothing here can be loaded by torch.

Everything is deterministic (fixed times, UUIDs derived from the content), so the same arguments give the
same bytes and the same S3 ETag. Standard library only.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import tarfile
import uuid
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

HEADER_SIZE = 1024
PKG_VERSION = 2  # gzip tarball, MD5 of it in the header
_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say


def _neff_version(neff_version: str) -> tuple[int, int]:
    major, _, minor = neff_version.partition(".")
    return int(major), int(minor or 0)


def _tar_member(tar: tarfile.TarFile, name: str, data: bytes | None) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uname = info.gname = "neuron"
    if data is None:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)
        return
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def neff_tarball(compiler_version: str, *, padding: int = 0, info_json: bytes | None = None,
                 with_info: bool = True) -> bytes:
    """The gzip tarball a NEFF carries. ``padding`` bytes of weights go before ``info.json`` (to put it past
    a reader's bounds); ``info_json`` replaces its content; ``with_info=False`` leaves it out."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        _tar_member(tar, "sg00", None)
        if padding:
            _tar_member(tar, "sg00/weights.bin", bytes(padding))
        if with_info:
            info = info_json if info_json is not None else json.dumps({"tool_version": compiler_version}).encode()
            _tar_member(tar, "info.json", info)
        _tar_member(tar, "kelf-0.json", json.dumps({"graphs": [{"definition": "sg00/def.json", "name": "sg00"}]})
                    .encode())
        _tar_member(tar, "neff.json", b"{}")
        _tar_member(tar, "sg00/def.json", json.dumps({"name": "sg00", "var": {}}).encode())
    return gzip.compress(raw.getvalue(), mtime=0)


def neff_header(data: bytes, neff_version: str = "2.0", *, name: str = "tritonfleet-standin",
                build_version: str = "", pkg_version: int = PKG_VERSION, header_size: int = HEADER_SIZE,
                data_size: int | None = None) -> bytes:
    """The 1024-byte ``neff_header_t`` for the tarball ``data`` (the sizes can be overridden, to craft
    broken headers)."""
    major, minor = _neff_version(neff_version)
    digest = hashlib.md5(data).digest()  # the checksum NEFF packaging uses
    head = struct.pack("<5Q128sI32s16s256sI64sQI",
                       pkg_version, header_size, len(data) if data_size is None else data_size, major, minor,
                       build_version.encode("ascii"),
                       1,  # num_tpb
                       digest + b"0" * 16,  # pkg 2: the MD5 in the first 16 bytes, ASCII "0" after it (libnrt's own)
                       uuid.UUID(bytes=hashlib.md5(digest + name.encode()).digest(), version=4).bytes,
                       name.encode("ascii"),
                       1,  # requested_tpb_count
                       b"",  # tpb_per_node
                       0,  # feature_bits
                       1)  # lnc_size
    assert len(head) == 556, len(head)
    return head + bytes(HEADER_SIZE - len(head))


def neff_bytes(compiler_version: str, neff_version: str = "2.0", *, name: str = "tritonfleet-standin",
               build_version: str = "", padding: int = 0) -> bytes:
    """A whole stand-in NEFF: header, then tarball."""
    data = neff_tarball(compiler_version, padding=padding)
    return neff_header(data, neff_version, name=name, build_version=build_version) + data


def write_neff(path: str | Path, compiler_version: str, neff_version: str = "2.0", *,
               name: str = "tritonfleet-standin", build_version: str = "", padding: int = 0) -> Path:
    """Write a stand-in NEFF ("compiled by neuronx-cc ``compiler_version``, NEFF ``neff_version``")."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(neff_bytes(compiler_version, neff_version, name=name, build_version=build_version,
                                padding=padding))
    return path


# --- TorchScript -----------------------------------------------------------------------------------------

_Value = bool | None | Callable[[], None]  # an attribute: a constant, or what writes it


class _Pickle:
    """The protocol-2 opcodes TorchScript's pickler writes for modules and custom-class objects."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")  # PROTO 2
        self._memo = 0

    def _put(self) -> None:
        self.out += b"q" + bytes([self._memo])  # BINPUT
        self._memo += 1

    def string(self, data: bytes) -> None:
        self.out += b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE: raw bytes, as the C++ pickler writes
        self._put()

    def global_(self, module: str, name: str) -> None:
        self.out += b"c" + module.encode() + b"\n" + name.encode() + b"\n"  # GLOBAL
        self._put()

    def new_object(self, module: str, name: str) -> None:
        self.global_(module, name)
        self.out += b")\x81"  # EMPTY_TUPLE NEWOBJ

    def module(self, module: str, name: str, attributes: list[tuple[str, _Value]]) -> None:
        """An nn.Module: the object, then BUILD with its attribute dict (values: bool, None, or a callable
        that writes the value)."""
        self.new_object(module, name)
        self.out += b"}("  # EMPTY_DICT MARK
        for key, value in attributes:
            self.string(key.encode())
            if value is None:
                self.out += b"N"
            elif isinstance(value, bool):
                self.out += b"\x88" if value else b"\x89"
            else:
                value()
        self.out += b"ub"  # SETITEMS BUILD

    def neuron_model(self, neff: bytes, metaneff: bytes) -> None:
        """A ``torch.classes.neuron.Model`` whose state is the pair (neff, metaneff) (an assumption)."""
        self.new_object("__torch__.torch.classes.neuron", "Model")
        self.string(neff)
        self.string(metaneff)
        self.out += b"\x86b"  # TUPLE2 BUILD

    def done(self) -> bytes:
        return bytes(self.out + b".")  # STOP


# A MetaNeff protobuf: input_tensors { name: "input0" }, output_tensors { name: "output0" }
_METANEFF = b"\x0a\x08\x0a\x06input0" + b"\x12\x09\x0a\x07output0"

_NEURONX_CODE = """\
class NeuronModule(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  _is_full_backward_hook : Optional[bool]
  model : __torch__.torch.classes.neuron.Model
  states : __torch__.torch.nn.modules.container.ParameterList
  def forward(self: __torch__.torch_neuronx.xla_impl.trace.NeuronModule,
    argument_1: Tensor) -> Tensor:
    model = self.model
    _0 = ops.neuron.forward_v2([argument_1], model)
    return _0[0]
"""

_CONTAINER_CODE = """\
class ParameterList(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  _is_full_backward_hook : Optional[bool]
"""

_NEURON_CODE = """\
class AwsNeuronGraphModule(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  _is_full_backward_hook : Optional[bool]
  _NeuronGraph0 : __torch__.torch_neuron.decorators.NeuronModuleV2
  def forward(self: __torch__.torch_neuron.decorators.AwsNeuronGraphModule,
    tensor: Tensor) -> Tensor:
    _NeuronGraph0 = self._NeuronGraph0
    return (_NeuronGraph0).forward(tensor, )
class NeuronModuleV2(Module):
  __parameters__ = []
  __buffers__ = []
  training : bool
  _is_full_backward_hook : Optional[bool]
  model : __torch__.torch.classes.neuron.Model
  def forward(self: __torch__.torch_neuron.decorators.NeuronModuleV2,
    argument_1: Tensor) -> Tensor:
    model = self.model
    _0 = ops.neuron.forward_v2([argument_1], model)
    return _0[0]
"""


def _zip(members: list[tuple[str, bytes, bool]]) -> bytes:
    """A zip of (name, data, deflated) with fixed dates, in order."""
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as zf:
        for name, data, deflated in members:
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED if deflated else zipfile.ZIP_STORED
            zf.writestr(info, data)
    return raw.getvalue()


def _archive(stem: str, data_pkl: bytes, code: Mapping[str, str], extra_files: Mapping[str, bytes]) -> bytes:
    members: list[tuple[str, bytes, bool]] = [(f"{stem}/extra/{k}", v, False) for k, v in extra_files.items()]
    members.append((f"{stem}/data.pkl", data_pkl, False))
    members += [(f"{stem}/code/__torch__/{k}", v.encode(), True) for k, v in code.items()]
    members += [(f"{stem}/constants.pkl", b"\x80\x02).", False),  # an empty tuple
                (f"{stem}/version", b"3\n", False),
                (f"{stem}/byteorder", b"little", False),
                (f"{stem}/.data/serialization_id", hashlib.sha1(data_pkl).hexdigest()[:40].encode(), False)]
    return _zip(members)


def torchscript_neuronx_bytes(compiler_version: str, neff_version: str = "2.0", *, stem: str = "model",
                              extra_files: Mapping[str, bytes] | None = None, neff: bytes | None = None) -> bytes:
    """A torch-neuronx TorchScript archive holding one NEFF (``neff`` replaces the generated one)."""
    neff = neff if neff is not None else neff_bytes(compiler_version, neff_version)
    p = _Pickle()
    p.module("__torch__.torch_neuronx.xla_impl.trace", "NeuronModule", [
        ("training", False),
        ("_is_full_backward_hook", None),
        ("model", lambda: p.neuron_model(neff, _METANEFF)),
        ("states", lambda: p.module("__torch__.torch.nn.modules.container", "ParameterList",
                                    [("training", False), ("_is_full_backward_hook", None)])),
    ])
    code = {"torch_neuronx/xla_impl/trace.py": _NEURONX_CODE, "torch/nn/modules/container.py": _CONTAINER_CODE}
    return _archive(stem, p.done(), code, extra_files or {})


def torchscript_neuron_bytes(compiler_version: str, neff_version: str = "1.0", *, stem: str = "model",
                             extra_files: Mapping[str, bytes] | None = None, neff: bytes | None = None) -> bytes:
    """A torch-neuron (Inf1) TorchScript archive: AwsNeuronGraphModule > NeuronModuleV2 > neuron.Model."""
    neff = neff if neff is not None else neff_bytes(compiler_version, neff_version)
    p = _Pickle()
    p.module("__torch__.torch_neuron.decorators", "AwsNeuronGraphModule", [
        ("training", False),
        ("_is_full_backward_hook", None),
        ("_NeuronGraph0", lambda: p.module("__torch__.torch_neuron.decorators", "NeuronModuleV2", [
            ("training", False),
            ("_is_full_backward_hook", None),
            ("model", lambda: p.neuron_model(neff, _METANEFF)),
        ])),
    ])
    return _archive(stem, p.done(), {"torch_neuron/decorators.py": _NEURON_CODE}, extra_files or {})


def write_torchscript_neuronx(path: str | Path, compiler_version: str, neff_version: str = "2.0", *,
                              extra_files: Mapping[str, bytes] | None = None, neff: bytes | None = None) -> Path:
    """Write a torch-neuronx stand-in model (``model.pt``) compiled by neuronx-cc ``compiler_version``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(torchscript_neuronx_bytes(compiler_version, neff_version, stem=path.stem,
                                               extra_files=extra_files, neff=neff))
    return path


def write_torchscript_neuron(path: str | Path, compiler_version: str = "1.24.0.0", neff_version: str = "1.0", *,
                             extra_files: Mapping[str, bytes] | None = None, neff: bytes | None = None) -> Path:
    """Write a torch-neuron (Inf1) stand-in model compiled by neuron-cc ``compiler_version``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(torchscript_neuron_bytes(compiler_version, neff_version, stem=path.stem,
                                              extra_files=extra_files, neff=neff))
    return path
