"""PromQL text from values (standard library only): a label value as an exact regex inside a double-quoted
string literal, escaped as Grafana's Prometheus data source escapes a variable for ``=~``. Shared by the
dashboards' checks (``tritonfleet/face/dashboards.py``) and the canary gates (``tritonfleet/fleet/gates.py``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

#: RE2 metacharacters (and the quote Grafana escapes too). Not "-": Python's re.escape escapes it, and "\-" is an
#: escape PromQL's string literal refuses ("unknown escape sequence"; bench/rollout.py's bench-N hosts found it).
_REGEX_SPECIAL = re.compile(r"[$^*{}\[\]'+?.()|]")


def regex_escape(value: str) -> str:
    """A label value as a regex inside a PromQL double-quoted string, as Grafana escapes it: regex
    metacharacters get a backslash, which the string literal itself needs doubled."""
    value = value.replace("\\", "\\\\\\\\")
    value = _REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), value)
    return value.replace('"', '\\"')


def alternation(values: Iterable[str]) -> str:
    """The body of a PromQL ``"..."`` string whose regex matches exactly these values (sorted)."""
    return "|".join(regex_escape(v) for v in sorted(values))
