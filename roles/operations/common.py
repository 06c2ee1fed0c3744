"""Helpers shared by the operations: failing with a reason, running a script from templates/scripts."""

from __future__ import annotations

import functools
import shlex

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.hiddenvalue import HiddenValue

from tritonfleet.templating import template_path


def fail(message: str) -> StringCommand:
    """A command that prints ``message`` on stderr and fails the operation with it."""
    return StringCommand(f"echo {shlex.quote('ERROR: ' + message)} >&2; exit 1")


def executing() -> bool:
    """True while pyinfra executes (facts then show the state after earlier operations)."""
    return bool(host.state.is_executing)


@functools.cache
def script_text(name: str) -> str:
    """``templates/scripts/<name>`` with its ``# include: <file>`` lines replaced by those files."""
    lines = []
    for line in template_path(f"scripts/{name}").read_text().splitlines(keepends=True):
        if line.startswith("# include: "):
            lines.append(script_text(line.split(":", 1)[1].strip()))
        else:
            lines.append(line)
    return "".join(lines)


def script(name: str, *args: object, secret: str | None = None, stdin: str | None = None) -> StringCommand:
    """Run ``templates/scripts/<name>`` with ``args`` in one remote command (``sh -c SCRIPT NAME ARGS``).

    Arguments containing ``secret`` are masked in pyinfra's output (``-vv``, ``--debug``); ``stdin`` is
    handed to the script on its standard input (for secrets that must not be arguments at all).
    """
    bits: list[object] = ["sh", "-c", QuoteString(script_text(name)), name]
    for arg in args:
        text = str(arg)
        bits.append(QuoteString(HiddenValue(text) if secret and secret in text else text))
    return StringCommand(*bits, _stdin=stdin) if stdin is not None else StringCommand(*bits)
