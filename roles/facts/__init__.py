"""Custom pyinfra facts, one module per subject (read-only commands, one command per fact)."""

from __future__ import annotations


def sections(output: list[str], marker: str = "@@") -> dict[str, list[str]]:
    """Split fact output into sections: a line ``<marker>name`` starts section ``name``; blank lines dropped."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in output:
        if line.startswith(marker):
            current = line[len(marker):].strip()
            out[current] = []
        elif line.strip():
            out.setdefault(current, []).append(line)
    return out
