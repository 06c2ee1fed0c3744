"""The SSH connection to each host: keepalives and a dead-peer timeout, so a host that stops answering
mid-run (a network partition, a hung instance) is named and failed while the other hosts finish.

pyinfra's own ``CONNECT_TIMEOUT`` (10 s) bounds connecting; this role bounds an established connection
that goes silent, which would otherwise block for as long as TCP retransmits (about 15 minutes). Long
commands (image builds, driver compiles) are not cut short: a live host answers the keepalives.
It has no operations: preflight calls its ``on_connect`` hook for every host before any fact is read.
"""

from __future__ import annotations

import socket

from pydantic import Field
from pyinfra import logger

from tritonfleet.config import HostConfig, Role, RoleSettings


class Settings(RoleSettings):
    keepalive: int = Field(10, ge=1, le=300, description="Seconds between SSH keepalive messages.")
    dead_after: int = Field(60, ge=5, le=3600, description=(
        "Seconds a host may leave keepalives and commands unanswered before its connection is closed and the "
        "host is reported failed (TCP_USER_TIMEOUT)."))


def harden(h, cfg: HostConfig) -> None:
    """Keepalives and TCP_USER_TIMEOUT on the host's SSH socket (called by preflight, before any fact)."""
    client = getattr(h.connector, "client", None)  # the SSH connector's paramiko client
    transport = client.get_transport() if client is not None else None
    if transport is None:  # local or @fake connector
        return
    transport.set_keepalive(cfg.connection.keepalive)
    try:
        transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, cfg.connection.dead_after * 1000)
    except (AttributeError, OSError) as exc:  # not Linux, or not a TCP socket (ProxyCommand)
        logger.warning(f"{h.name}: dead-peer timeout not set ({exc}); keepalives only")


ROLE = Role("connection", Settings, "SSH keepalives and a dead-peer timeout for every host", order=5,
            on_connect=harden)
