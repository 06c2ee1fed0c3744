"""Files tritonfleet manages: content digests and modes of many paths in one command."""

from __future__ import annotations

from shlex import quote

from pyinfra.api import FactBase


class FileDigests(FactBase[dict]):
    """``{path: (sha256, mode)}`` for the paths that exist as regular files (mode as octal text)."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self, paths: tuple[str, ...]) -> str:
        return ("for f in " + " ".join(quote(p) for p in paths) + "; do [ -f \"$f\" ] || continue; "
                "printf '%s %s %s\\n' \"$(sha256sum < \"$f\" | cut -d' ' -f1)\" \"$(stat -c %a \"$f\")\" \"$f\"; done")

    def process(self, output: list[str]) -> dict:
        out = {}
        for line in output:
            parts = line.split(" ", 2)
            if len(parts) == 3:
                out[parts[2]] = (parts[0], parts[1])
        return out


class TreeDigests(FactBase[dict]):
    """``{relative path: sha256}`` of every regular file under a directory ({} when it is absent)."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self, path: str) -> str:
        return f"! test -d {quote(path)} || (cd {quote(path)} && find . -type f -exec sha256sum {{}} +)"

    def process(self, output: list[str]) -> dict:
        out = {}
        for line in output:
            digest, _, name = line.partition("  ")
            if name:
                out[name.removeprefix("./")] = digest
        return out


class ServiceStates(FactBase[dict]):
    """``{unit: {"active": ActiveState, "enabled": UnitFileState}}`` (units systemd does not know are absent)."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self, units: tuple[str, ...]) -> str:
        return ("systemctl show -p Id -p ActiveState -p UnitFileState -p LoadState "
                + " ".join(quote(u) for u in units) + " 2>/dev/null || true")

    def process(self, output: list[str]) -> dict:
        out: dict = {}
        current: dict = {}
        for line in output + [""]:
            if not line.strip():
                if current.get("Id") and current.get("LoadState") != "not-found":
                    out[current["Id"]] = {"active": current.get("ActiveState"), "enabled": current.get("UnitFileState")}
                current = {}
                continue
            key, _, value = line.partition("=")
            current[key] = value.strip()
        return out
