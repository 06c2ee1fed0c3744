"""SSH sessions to inventory hosts (paramiko, strict host keys, bounded timeouts) and the Docker API
over them (the docker SDK speaking to ``docker system dial-stdio`` through the same session, with
``sudo -n`` where the inventory sets ``_sudo``)."""

from __future__ import annotations

import getpass
import shlex
from dataclasses import dataclass, field

import docker
import paramiko
from docker.transport.sshconn import SSHConnection, SSHConnectionPool, SSHHTTPAdapter

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
        if root and self.sudo:
            command = "sudo -n sh -c " + shlex.quote(command)
        chan_in, out, err = self.client.exec_command(command, timeout=timeout)
        if stdin is not None:
            chan_in.write(stdin)
        chan_in.channel.shutdown_write()
        text, errors = out.read().decode(), err.read().decode()
        return out.channel.recv_exit_status(), text, errors

    def docker(self, timeout: float = COMMAND_TIMEOUT) -> docker.DockerClient:
        """A Docker client talking to the host's engine through this session."""
        api = docker.APIClient(base_url="tcp://127.0.0.1:9", version="1.41", timeout=timeout)
        api.mount("http+docker://ssh", _SessionAdapter(self, timeout))
        api.base_url = "http+docker://ssh"
        client = docker.DockerClient.__new__(docker.DockerClient)
        client.api = api
        return client

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
        client.connect(data.get("ssh_hostname", name), port=int(data.get("ssh_port", 22)),
                       username=data.get("ssh_user") or getpass.getuser(), key_filename=data.get("ssh_key"),
                       timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                       look_for_keys=not data.get("ssh_key"), allow_agent=True)
    except (OSError, paramiko.SSHException) as exc:
        client.close()
        raise HostUnreachable(f"ssh: {exc or type(exc).__name__}") from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)
    return Session(name, data, client)


class _SessionConnection(SSHConnection):
    def __init__(self, session: Session, timeout: float) -> None:
        super().__init__(session.client.get_transport(), timeout, session.name)
        self._sudo = session.sudo

    def connect(self) -> None:
        sock = self.ssh_transport.open_session()
        sock.settimeout(self.timeout)
        sock.exec_command(("sudo -n " if self._sudo else "") + "docker system dial-stdio")
        self.sock = sock


class _SessionPool(SSHConnectionPool):
    def __init__(self, session: Session, timeout: float) -> None:
        super().__init__(session.client, timeout, maxsize=2, host=session.name)
        self._session = session

    def _new_conn(self) -> _SessionConnection:
        return _SessionConnection(self._session, self.timeout)


class _SessionAdapter(SSHHTTPAdapter):
    """docker's SSH adapter on an existing paramiko session (ours has strict host keys and the inventory's
    key file; docker's would read only ~/.ssh)."""

    def __init__(self, session: Session, timeout: float) -> None:
        self._session = session
        super().__init__(f"ssh://{session.name}", timeout=timeout, shell_out=True)
        self.ssh_client = session.client

    def get_connection(self, url, proxies=None):
        with self.pools.lock:
            pool = self.pools.get(url)
            if pool is None:
                pool = _SessionPool(self._session, self.timeout)
                self.pools[url] = pool
            return pool

    def close(self) -> None:  # the session owns the SSH client
        self.pools.clear()
