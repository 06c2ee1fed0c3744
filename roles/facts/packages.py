"""Installed packages, whatever the package manager: one command for every package a run checks."""

from __future__ import annotations

from pyinfra.api import FactBase


class InstalledPackages(FactBase[dict]):
    """``{name: [version, ...]}`` of installed packages (dpkg or rpm; epochs dropped)."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self) -> str:
        return ("if command -v dpkg-query >/dev/null; then dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\\n'"
                " 2>/dev/null | awk '$1 ~ /^.i/ {print $2, $3}'; "
                "elif command -v rpm >/dev/null; then rpm -qa --qf '%{NAME} %{VERSION}-%{RELEASE}\\n'; fi")

    def process(self, output: list[str]) -> dict:
        out: dict[str, list[str]] = {}
        for line in output:
            parts = line.split()
            if len(parts) == 2:
                name, version = parts
                out.setdefault(name.split(":", 1)[0], []).append(version.split(":", 1)[-1])
        return out
