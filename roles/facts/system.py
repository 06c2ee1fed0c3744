"""Host facts that are not about one subject's software: keys, IMDS, simple probes."""

from __future__ import annotations

from shlex import quote

from pyinfra.api import FactBase
from pyinfra.facts import server


class LinuxDistribution(server.LinuxDistribution):
    """pyinfra's ``server.LinuxDistribution``, as a fact of roles/facts/ (a fact plan names only these)."""


class KernelVersion(server.KernelVersion):
    """pyinfra's ``server.KernelVersion``, as a fact of roles/facts/ (a fact plan names only these)."""


class KeyringFingerprints(FactBase[list]):
    """OpenPGP fingerprints in a keyring file (empty list when the file is absent)."""

    @staticmethod
    def default() -> list:
        return []

    def command(self, path: str) -> str:
        return (f"! test -s {quote(path)} || gpg --batch --show-keys --with-colons {quote(path)} 2>/dev/null "
                "| awk -F: '/^fpr/{print $10}'")

    def process(self, output: list[str]) -> list:
        return [line.strip().upper() for line in output if line.strip()]


class ImdsInstanceType(FactBase[str]):
    """The instance type as IMDS (v2, token first) reports it, or '' when IMDS does not answer."""

    @staticmethod
    def default() -> str:
        return ""

    def command(self, endpoint: str) -> str:
        endpoint = quote(endpoint.rstrip("/"))
        return (f"t=$(curl -fsS -m 3 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' {endpoint}/latest/api/token "
                f"2>/dev/null); curl -fsS -m 3 ${{t:+-H \"X-aws-ec2-metadata-token: $t\"}} "
                f"{endpoint}/latest/meta-data/instance-type 2>/dev/null || true")

    def process(self, output: list[str]) -> str:
        return output[0].strip()


class CommandSucceeds(FactBase[bool]):
    """Whether a read-only probe command exits 0."""

    @staticmethod
    def default() -> bool:
        return False

    def command(self, command: str) -> str:
        return f"( {command} ) >/dev/null 2>&1 && echo yes || true"

    def process(self, output: list[str]) -> bool:
        return output[0].strip() == "yes"
