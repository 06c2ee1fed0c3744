"""The sandbox network: the bridge, one network namespace and veth pair per host, subnet and port checks."""

from __future__ import annotations

import socket
from pathlib import Path

from tritonfleet.sandbox.layout import (
    BRIDGE,
    BRIDGE_IP,
    NETNS_PREFIX,
    SUBNET,
    SUBNET_PREFIX,
    VETH_PREFIX,
    HostState,
    SandboxError,
    run,
)


def check_subnet_free() -> None:
    """Our subnet and ports must not be in use by anything that is not ours."""
    out = run(["ip", "-o", "-4", "addr", "show"]).stdout
    for line in out.splitlines():
        parts = line.split()
        dev, addr = parts[1], parts[3]
        if addr.startswith(SUBNET_PREFIX) and dev != BRIDGE:
            raise SandboxError(f"subnet {SUBNET} is already used by {dev} ({addr}); the sandbox needs it for its hosts")
    routes = run(["ip", "-4", "route", "show", SUBNET]).stdout.strip()
    if routes and f"dev {BRIDGE}" not in routes:
        raise SandboxError(f"subnet {SUBNET} is already routed ({routes}); the sandbox needs it")


def check_port_free(port: int) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((BRIDGE_IP, port))
        except OSError as exc:
            raise SandboxError(f"port {BRIDGE_IP}:{port} is in use ({exc.strerror}); the sandbox needs it") from None


def ensure_bridge() -> None:
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    addrs = run(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE]).stdout
    if f"{BRIDGE_IP}/24" not in addrs:
        run(["ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])


def bridge_exists() -> bool:
    return Path(f"/sys/class/net/{BRIDGE}").exists()


def host_mac(ip: str) -> str:
    """The MAC address of a host's ``eth0``: fixed by its address (locally administered, unicast), as an EC2
    instance keeps its interface's. A host made again (``reset_host``) then answers at the MAC the controller's
    and the other hosts' neighbour tables already hold; with a new random MAC each time, traffic to it went to
    the old one until those entries expired (about 40 s)."""
    octets = [int(x) for x in ip.split(".")]
    return "02:74:66:" + ":".join(f"{o:02x}" for o in octets[1:])


def add_host_network(h: HostState) -> None:
    """The host's namespace with ``eth0`` (its address, :func:`host_mac`) paired to a veth on the bridge."""
    run(["ip", "netns", "add", h.netns])
    run(["ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "address", host_mac(h.ip),
         "netns", h.netns])
    run(["ip", "link", "set", h.veth, "master", BRIDGE, "up"])
    run(["ip", "neigh", "flush", "to", h.ip, "dev", BRIDGE], check=False)  # whatever an earlier host left
    run(["ip", "-n", h.netns, "link", "set", "lo", "up"])
    run(["ip", "-n", h.netns, "addr", "add", f"{h.ip}/24", "dev", "eth0"])
    run(["ip", "-n", h.netns, "link", "set", "eth0", "up"])


def del_host_network(h: HostState) -> None:
    run(["ip", "netns", "del", h.netns], check=False)
    run(["ip", "link", "del", h.veth], check=False)


def netns_exists(h: HostState) -> bool:
    return Path(f"/run/netns/{h.netns}").exists()


def our_netns() -> list[str]:
    names = [line.split()[0] for line in run(["ip", "netns", "list"], check=False).stdout.splitlines() if line.split()]
    return [n for n in names if n.startswith(NETNS_PREFIX)]


def our_links() -> list[str]:
    """The bridge and every host veth that exist."""
    out = []
    for line in run(["ip", "-o", "link", "show"]).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name == BRIDGE or name.startswith(VETH_PREFIX):
            out.append(name)
    return out


def remove_all() -> None:
    """Every namespace, veth and the bridge of any sandbox (current or stale)."""
    for n in our_netns():
        run(["ip", "netns", "del", n], check=False)
    for name in our_links():
        if name != BRIDGE:
            run(["ip", "link", "del", name], check=False)
    run(["ip", "link", "del", BRIDGE], check=False)
