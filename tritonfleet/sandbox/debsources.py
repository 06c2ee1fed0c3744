"""The controller's Debian mirrors, read from its ``debian.sources`` (the one parser for that file)."""

from __future__ import annotations

from pathlib import Path

DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY = "http://deb.debian.org/debian-security"
SUITE = "bookworm"


def debian_mirrors(path: Path | None = None) -> tuple[str, str]:
    """(mirror, security mirror) URLs from the deb822 ``debian.sources`` (Debian's defaults without it)."""
    mirror, security = DEFAULT_MIRROR, DEFAULT_SECURITY
    try:
        stanzas = (path or DEBIAN_SOURCES).read_text(encoding="utf-8").split("\n\n")
    except OSError:
        return mirror, security
    for stanza in stanzas:
        fields = dict(
            line.split(":", 1) for line in stanza.splitlines() if ":" in line and not line.startswith("#")
        )
        uris, suites = fields.get("URIs", "").split(), fields.get("Suites", "").split()
        if not uris:
            continue
        if any(s.endswith("-security") for s in suites):
            security = uris[0]
        elif SUITE in suites:
            mirror = uris[0]
    return mirror, security


def bookworm_lines(path: Path | None = None) -> list[str]:
    """One-line ``deb`` sources for bookworm, bookworm-updates and bookworm-security (``main``)."""
    mirror, security = debian_mirrors(path)
    return [
        f"deb {mirror} {SUITE} main",
        f"deb {mirror} {SUITE}-updates main",
        f"deb {security} {SUITE}-security main",
    ]
