"""SSH sessions to inventory hosts (paramiko, strict host keys, bounded timeouts); commands run in them,
under ``sudo -n`` where the inventory sets ``_sudo`` and the command needs root (Docker is asked that way:
``docker inspect`` through :mod:`tritonfleet.access.dockerinspect`)."""

from __future__ import annotations

import getpass
import logging
import shlex
import time
from dataclasses import dataclass, field

import paramiko

logger = logging.getLogger(__name__)

#: Seconds for connecting, and the default for one remote command.
CONNECT_TIMEOUT = 10
COMMAND_TIMEOUT = 30


class HostUnreachable(RuntimeError):
    """SSH to the host failed; the message says why (refused, timeout, unknown host key...)."""


@dataclass
class Session:
    """An open SSH session to one inventory host."""

    name: str
    data: dict
    client: paramiko.SSHClient = field(repr=False)

    @property
    def sudo(self) -> bool:
        return bool(self.data.get("_sudo"))

    def run(self, command: str, *, stdin: str | None = None, timeout: float = COMMAND_TIMEOUT,
            root: bool = False) -> tuple[int, str, str]:
        """Run ``command`` (under ``sudo -n`` when ``root`` and the host uses sudo); ``(rc, out, err)``."""
        shown = command  # our commands carry no secret (those go on stdin); the sudo wrapping is left out
        if root and self.sudo:
            command = "sudo -n sh -c " + shlex.quote(command)
        started = time.monotonic()
        chan_in, out, err = self.client.exec_command(command, timeout=timeout)
        if stdin is not None:
            chan_in.write(stdin)
        chan_in.channel.shutdown_write()
        text, errors = out.read().decode(), err.read().decode()
        rc = out.channel.recv_exit_status()
        logger.debug("%s: rc %d in %.1fs%s: %s", self.name, rc, time.monotonic() - started,
                     " (sudo)" if root and self.sudo else "", shown[:300])
        return rc, text, errors

    def close(self) -> None:
        self.client.close()


def connect(name: str, data: dict, timeout: float = CONNECT_TIMEOUT) -> Session:
    """Open a session with the inventory's SSH settings; unknown host keys are refused."""
    client = paramiko.SSHClient()
    client.load_system_host_keys()
    if data.get("ssh_known_hosts_file"):
        client.load_host_keys(data["ssh_known_hosts_file"])
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        address, port = data.get("ssh_hostname", name), int(data.get("ssh_port", 22))
        user = data.get("ssh_user") or getpass.getuser()
        logger.debug("%s: ssh %s@%s:%d (key %s, timeout %ss)", name, user, address, port,
                     data.get("ssh_key") or "from the agent or ~/.ssh", timeout)
        client.connect(address, port=port, username=user, key_filename=data.get("ssh_key"),
                       timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                       look_for_keys=not data.get("ssh_key"), allow_agent=True)
    except (OSError, paramiko.SSHException) as exc:
        client.close()
        logger.debug("%s: ssh failed: %s: %s", name, type(exc).__name__, exc)
        raise HostUnreachable(f"ssh: {exc or type(exc).__name__}") from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)
    return Session(name, data, client)
