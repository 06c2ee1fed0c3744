"""protobuf's text format, read without protobuf (standard library only, Python 3.9): the host agent's reader of a
model's ``config.pbtxt``, keeping only what the memory rules (:mod:`tritonfleet.agent.memory`) use — the
``parameters`` map's ``string_value``s, each ``instance_group``'s ``kind``, ``count`` and ``gpus``, and
``version_policy``. The whole syntax is read (comments, ``{}``/``<>`` messages, optional ``:`` before a message,
``[...]`` lists, optional ``,``/``;`` separators, adjacent strings, C escapes) into a schema-less tree; the rest
is not validated (Triton refuses an unknown field when it loads the model). tests/unit/test_memory_config.py
holds this reader and protobuf's to the same :class:`Config` on the same inputs."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

#: Triton's ``ModelInstanceGroup.Kind`` values, by number.
KINDS = ("KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL")


@dataclass(frozen=True)
class Group:
    """One ``instance_group``: its ``kind`` (a :data:`KINDS` name, or the number of one Triton does not know),
    ``count`` as written (0: unset, Triton's 1) and the ``gpus`` it lists."""

    kind: str = "KIND_AUTO"
    count: int = 0
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class Config:
    """What the footprint rules read of a model's ``config.pbtxt``: the ``parameters`` (key -> string_value),
    the ``instance_group`` entries and the ``version_policy`` (``policy`` "latest", "all", "specific" or None when
    unset; ``num_versions`` of latest, ``versions`` of specific). ``Config()`` is a model without a
    ``config.pbtxt`` (Triton's defaults)."""

    parameters: dict[str, str] = field(default_factory=dict)
    groups: tuple[Group, ...] = ()
    policy: str | None = None
    num_versions: int = 0
    versions: tuple[int, ...] = ()


class ConfigSyntaxError(ValueError):
    """Text that is not protobuf's text format (one line, with the line number)."""


_TOKEN = re.compile(r"""
    (?P<skip>(?:\s|\#[^\n]*)+)
  | (?P<string>"(?:[^"\n\\]|\\.)*"|'(?:[^'\n\\]|\\.)*')
  | (?P<word>[A-Za-z_][0-9A-Za-z_+-]*|(?:[0-9+-]|\.[0-9])[0-9A-Za-z_.+-]*)
  | (?P<punct>[{}<>\[\]:;,./])
""", re.VERBOSE)
_CUNESCAPE_HEX = re.compile(r"(\\+)x([0-9a-fA-F])(?![0-9a-fA-F])")  # protobuf's text_encoding, as it is
_CLOSE = {"{": "}", "<": ">"}

if TYPE_CHECKING:  # a scalar: ("s", decoded string) or ("w", identifier or number as written); a message:
    # field name -> values (type aliases for the checker only: the agent's Python 3.9 has no X | Y at run time)
    _Scalar = tuple[str, str]
    _Message = dict[str, list[_Scalar | "_Message"]]
    _Path = str | os.PathLike[str]


def _unescape(text: str, line: int) -> str:
    """A string literal's body as protobuf's ``CUnescape`` decodes it (C escapes, then UTF-8)."""
    def hex1(m: re.Match) -> str:  # single-digit \xF: unicode_escape wants two digits
        return m.group(1) + "x0" + m.group(2) if len(m.group(1)) & 1 else m.group(0)
    try:
        raw = _CUNESCAPE_HEX.sub(hex1, text).encode("utf-8").decode("unicode_escape").encode("raw_unicode_escape")
        return raw.decode("utf-8")
    except (UnicodeError, ValueError) as exc:
        raise ConfigSyntaxError(f"line {line}: bad string literal: {exc}") from None


class _Reader:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, line)
        pos, line = 0, 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise ConfigSyntaxError(f"line {line}: unexpected {text[pos]!r}")
            kind = m.lastgroup or ""
            if kind != "skip":
                self.tokens.append((kind, m.group(), line))
            line += m.group().count("\n")
            pos = m.end()
        self.i = 0

    def peek(self) -> str:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else ""

    def kind(self) -> str:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else ""

    def line(self) -> int:
        return self.tokens[min(self.i, len(self.tokens) - 1)][2] if self.tokens else 1

    def take(self) -> str:
        if self.i >= len(self.tokens):
            raise ConfigSyntaxError(f"line {self.line()}: unexpected end")
        self.i += 1
        return self.tokens[self.i - 1][1]

    def expect(self, token: str) -> None:
        got = self.take()
        if got != token:
            raise ConfigSyntaxError(f"line {self.line()}: expected {token!r}, found {got!r}")

    def message(self, end: str) -> _Message:
        """Fields up to ``end`` (``""``: the end of the text)."""
        fields: _Message = {}
        while True:
            if self.peek() == end and (end or self.i >= len(self.tokens)):
                if end:
                    self.take()
                return fields
            name = self.name()
            colon = self.peek() == ":"
            if colon:
                self.take()
            values = fields.setdefault(name, [])
            if self.peek() == "[":
                self.take()
                if self.peek() == "]":
                    self.take()
                else:
                    while True:
                        values.append(self.value(colon=True))
                        if self.peek() == "]":
                            self.take()
                            break
                        self.expect(",")
            else:
                values.append(self.value(colon))
            if self.peek() in (",", ";"):
                self.take()

    def name(self) -> str:
        if self.peek() == "[":  # an extension or an Any's type URL: [a.b.c] or [type.googleapis.com/a.B]
            self.take()
            parts = []
            while self.peek() not in ("]", ""):
                parts.append(self.take())
            self.expect("]")
            return "[" + "".join(parts) + "]"
        if self.kind() != "word":
            raise ConfigSyntaxError(f"line {self.line()}: expected a field name, found {self.peek() or 'the end'!r}")
        return self.take()

    def value(self, colon: bool) -> _Scalar | _Message:
        token = self.peek()
        if token in _CLOSE:
            self.take()
            return self.message(_CLOSE[token])
        if not colon:
            raise ConfigSyntaxError(f"line {self.line()}: expected ':' before {token or 'the end'!r}")
        if self.kind() == "string":
            line = self.line()
            parts = []
            while self.kind() == "string":
                parts.append(self.take()[1:-1])
            return ("s", "".join(_unescape(p, line) for p in parts))
        if self.kind() == "word":
            return ("w", self.take())
        raise ConfigSyntaxError(f"line {self.line()}: expected a value, found {token or 'the end'!r}")


def _messages(msg: _Message, name: str) -> list[_Message]:
    out = [v for v in msg.get(name, []) if isinstance(v, dict)]
    if len(out) != len(msg.get(name, [])):
        raise ConfigSyntaxError(f"{name}: expected a message {{ ... }}")
    return out


def _scalars(msg: _Message, name: str) -> list[_Scalar]:
    out = [v for v in msg.get(name, []) if isinstance(v, tuple)]
    if len(out) != len(msg.get(name, [])):
        raise ConfigSyntaxError(f"{name}: expected a value, not a message")
    return out


def _string(msg: _Message, name: str) -> str:
    values = _scalars(msg, name)
    if values and values[-1][0] != "s":
        raise ConfigSyntaxError(f"{name}: expected a string, found {values[-1][1]}")
    return values[-1][1] if values else ""


def _integer(text: str, name: str) -> int:
    """An integer as protobuf's text format reads one (decimal, 0x hex, C octal 0755)."""
    octal = re.match(r"(-?)0(\d+)$", text)
    try:
        return int(f"{octal.group(1)}0o{octal.group(2)}" if octal else text, 0)
    except ValueError:
        raise ConfigSyntaxError(f"{name}: expected an integer, found {text}") from None


def _integers(msg: _Message, name: str) -> list[int]:
    out = []
    for kind, text in _scalars(msg, name):
        if kind != "w":
            raise ConfigSyntaxError(f"{name}: expected an integer, found a string")
        out.append(_integer(text, name))
    return out


def _kind(msg: _Message) -> str:
    values = _scalars(msg, "kind")
    if not values:
        return KINDS[0]
    kind, text = values[-1]
    if kind == "w" and text in KINDS:
        return text
    try:
        number = int(text, 0) if kind == "w" else None
    except ValueError:
        number = None
    if number is None:
        raise ConfigSyntaxError(f"kind: {text!r} is not one of {', '.join(KINDS)}")
    return KINDS[number] if 0 <= number < len(KINDS) else str(number)


def config_from_text(text: str) -> Config:
    """The :class:`Config` of ``config.pbtxt`` text (see the module docstring). Raises
    :class:`ConfigSyntaxError`."""
    top = _Reader(text).message("")
    parameters: dict[str, str] = {}
    for entry in _messages(top, "parameters"):  # a map: the last entry of a key wins
        values = _messages(entry, "value")
        parameters[_string(entry, "key")] = _string(values[-1], "string_value") if values else ""
    groups = []
    for g in _messages(top, "instance_group"):
        counts = _integers(g, "count")
        groups.append(Group(_kind(g), counts[-1] if counts else 0, tuple(_integers(g, "gpus"))))
    policy: str | None = None
    num_versions = 0
    versions: tuple[int, ...] = ()
    for vp in _messages(top, "version_policy"):
        for choice in vp:  # a oneof: the last one given
            if choice not in ("latest", "all", "specific"):
                continue
            policy = choice
            for sub in _messages(vp, choice):
                if choice == "latest":
                    num_versions = (_integers(sub, "num_versions") or [num_versions])[-1]
                elif choice == "specific":
                    versions += tuple(_integers(sub, "versions"))
    return Config(parameters, tuple(groups), policy, num_versions, versions)
