"""Custom pyinfra facts, one module per subject (read-only commands, one command per fact)."""

from __future__ import annotations

from tritonfleet.access import hostprobe


def sections(output: list[str], marker: str = "@@") -> dict[str, list[str]]:
    """Split fact output into sections: a line ``<marker>name`` starts section ``name``; blank lines dropped
    (:func:`tritonfleet.access.hostprobe.sections`, lines kept as they came)."""
    return hostprobe.sections(output, marker, strip=False)
