"""The ``type=`` callables of ``tritonfleet-agent``'s arguments: each parses one argument's text into its
value, or raises :class:`argparse.ArgumentTypeError` with the one line argparse prints after ``argument
--NAME:``. The parser itself is built in ``cli.py``, which imports these under the same names (tests reach
them there). Standard library and :func:`.sync.parse_source` only; Python 3.9, like the rest of the agent.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from .sync import parse_source


def _whole(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{n} is not within {lo} to {hi}")
        return n
    return parse


def _source(text: str) -> tuple[str, str]:
    try:
        return parse_source(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _endpoint(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.username or parts.password:
        raise argparse.ArgumentTypeError(f"not an http(s) URL without credentials: {text!r}")
    return text


def _region(text: str) -> str:
    if not re.match(r"^[a-z]{2,}(-[a-z0-9]+)+$", text):
        raise argparse.ArgumentTypeError(f"not a region name: {text!r}")
    return text


def _server(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if not sep or not re.match(r"^[A-Za-z0-9_.-]+$", name) or parts.scheme not in ("grpc", "http", "https") \
            or not parts.netloc or parts.username or parts.password \
            or (parts.scheme == "grpc" and (port is None or parts.path.strip("/") or parts.query)):
        raise argparse.ArgumentTypeError(f"expected NAME=grpc://HOST:PORT (or NAME=http://HOST:PORT), got {text!r}")
    return name, url.rstrip("/")


_MODEL = re.compile(r"^[A-Za-z0-9_.-]+$")


def _server_models(text: str) -> tuple[str, frozenset[str]]:
    """``NAME=MODEL[,MODEL...]``: the models server NAME loads (``NAME=``: none)."""
    name, sep, rest = text.partition("=")
    models = rest.split(",") if rest else []
    if not sep or not _MODEL.match(name) or not all(_MODEL.match(m) for m in models):
        raise argparse.ArgumentTypeError(f"expected NAME=MODEL[,MODEL...] (model directory names), got {text!r}")
    return name, frozenset(models)


_CAPACITY = re.compile(r"^([A-Za-z0-9_.-]+)=([0-9]{1,4})x([0-9]{1,9})$")


def _server_capacity(text: str) -> tuple[str, int, int]:
    """``NAME=DEVICESxMIB``: server NAME's DEVICES devices (or GPUs) hold MIB each."""
    m = _CAPACITY.match(text)
    if not m or int(m.group(2)) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=DEVICESxMIB (e.g. triton=2x32768), got {text!r}")
    return m.group(1), int(m.group(2)), int(m.group(3))


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}") from None
    if not 0 <= value < 100:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text} is not within 0 to below 100")
    return value


def _host_name(text: str) -> str:
    if not text.strip() or len(text) > 255 or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"not a host name: {text!r}")
    return text


_QA_SCHEMES = {"grpc": "grpc", "grpcs": "grpc", "http": "http", "https": "http"}


def _qa_server(text: str) -> tuple[str, dict[str, str]]:
    """``NAME=URL[,URL]``: a gRPC (grpc://, grpcs://) and/or an HTTP (http://, https://) URL with a port."""
    name, sep, rest = text.partition("=")
    bad = argparse.ArgumentTypeError(f"expected NAME=grpc://HOST:PORT[,http://HOST:PORT], got {text!r}")
    if not sep or not re.match(r"^[A-Za-z0-9_.-]+$", name):
        raise bad
    urls: dict[str, str] = {}
    for url in rest.split(","):
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = None
        protocol = _QA_SCHEMES.get(parts.scheme)
        if protocol is None or not parts.hostname or port is None or parts.username or parts.password \
                or parts.path not in ("", "/") or parts.query or protocol in urls:
            raise bad
        urls[protocol] = f"{parts.scheme}://{parts.netloc}"
    return name, urls


def _stamp(text: str) -> str:
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$", text):
        raise argparse.ArgumentTypeError(f"not a file-name-safe stamp (letters, digits, _ . -): {text!r}")
    return text


def _seconds_in(lo: float, hi: float, above: bool = False) -> Callable[[str], float]:
    """Seconds from ``lo`` (excluded with ``above``) to ``hi``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not (lo < value if above else lo <= value) or not value <= hi:  # NaN fails both
            raise argparse.ArgumentTypeError(f"{text} is not within {lo:g} to {hi:g} seconds")
        return value
    return parse


_seconds = _seconds_in(0, 3600, above=True)
