"""The sandbox fleet: local hosts that behave like EC2 instances, minus the accelerator silicon.

Each host is a ``systemd-nspawn -b`` container booted from an overlay on a cached Debian 12 base,
in its own network namespace on the bridge ``tfbr0`` (192.168.250.0/24, the controller is .1), in
its own cgroup subtree, reachable over SSH with strict host key checking. The controller serves the
signed apt repositories (Debian mirror, Neuron and NVIDIA stand-ins), an IMDS stand-in and a moto
S3 endpoint on the bridge address. Hosts have no default route: they reach nothing else.

Like EC2 instances, hosts keep their disks when they reboot (their launcher starts them again) or stop
(``up`` starts them again); only ``down`` (and :func:`reset_host`) discard disks.

Only hardware is simulated, and only here: ``/etc/tritonfleet-sandbox/hardware.json`` (read by the
stand-in driver/tool packages), the IMDS answers, and a runc wrapper that clamps rlimits this
machine cannot grant. Roles never know they run in the sandbox.

This module is the fleet's lifecycle (up, down, status, reset); the parts are in :mod:`.layout`
(names, paths, state), :mod:`.baseimage`, :mod:`.services`, :mod:`.network`, :mod:`.cgroups`,
:mod:`.machine` (processes, sockets, mounts) and :mod:`.hosts`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from tritonfleet import catalog
from tritonfleet.sandbox import cgroups, cloudinit, layout, machine, network, pypi, services
from tritonfleet.sandbox.baseimage import check_prerequisites, ensure_base
from tritonfleet.sandbox.fsutil import write_atomic
from tritonfleet.sandbox.hosts import (
    alive,
    create_host,
    ensure_client_key,
    has_disk,
    is_launcher,
    preinstall,
    remove_host,
    runs_some_host,
    ssh,
    ssh_base_args,
    start_host,
    stop_host,
    wait_host,
    write_known_hosts,
)
from tritonfleet.sandbox.layout import (
    HostSpec,
    HostState,
    SandboxError,
    host_state,
    hosts_from_state,
    imds_hosts_file,
    key_path,
    known_hosts_path,
    load_state,
    locked,
    log,
    s3_endpoint,
    save_state,
    state_file,
)
from tritonfleet.sandbox.prefetch import prefetch
from tritonfleet.sandbox.services import ensure_services

__all__ = [  # what the CLI, the inventory and the e2e tests use
    "HostSpec", "HostState", "LB_NAME", "LB_TYPE", "SandboxError", "cleanup_all", "default_specs", "down",
    "find_cgroups", "get_host", "hosts_from_state", "key_path", "known_hosts_path", "leftovers", "load_state",
    "boot_host", "reset_host", "reset_hosts", "s3_endpoint", "wait_user_data", "ssh", "ssh_base_args", "status", "up",
]
#: the project (its pyproject.toml: what a booted host's bundle installs)
PROJECT = Path(__file__).resolve().parents[2]
# Names of :mod:`.layout` that callers read from here (always the current value, patched or not).
_LAYOUT_NAMES = {"BRIDGE", "BRIDGE_IP", "IMDS_PORT", "NETNS_PREFIX", "PROMETHEUS_PORT", "REPO_PORT", "S3_BUCKET", "S3_PORT",
                 "S3_PREFIX", "S3_REGION", "SAMPLES", "EXTRA_SAMPLES", "STATE_DIR", "VETH_PREFIX"}


def __getattr__(name: str):
    if name in _LAYOUT_NAMES:
        return getattr(layout, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------
# What of ours exists on the machine
# ---------------------------------------------------------------------------------------------


def _host_names(state: dict) -> list[str]:
    return list(state.get("hosts", {}))


def find_cgroups(state: dict | None = None) -> list[Path]:
    """Every cgroup of ours (see :func:`cgroups.find_cgroups`)."""
    return cgroups.find_cgroups(_host_names(load_state() if state is None else state))


def _processes(state: dict, *, listening: bool = True) -> dict[int, str]:
    """``{pid: note}`` of the processes of ours: the services and launchers the state records, anything
    that runs like them (from another cache dir, or no longer in any state) and everything in our hosts'
    cgroups. ``listening``: also whatever listens on the services' ports at the bridge address, ours or
    not (pid 0: owner unknown), to report, never to kill."""
    found = {pid: "" for pid in services.recorded_pids(state)}
    for h in hosts_from_state(state):
        if machine.ours(h.nspawn_pid, partial(is_launcher, root=h.root)):
            found[h.nspawn_pid] = ""
    hosts_dir = layout.STATE_DIR / "hosts"
    for pid in machine.all_pids():
        args = machine.argv(pid)
        if services.looks_like_service(args) or runs_some_host(" ".join(args), hosts_dir):
            found.setdefault(pid, "")
    for cg in find_cgroups(state):
        found.update({p: "" for p in cgroups.cgroup_pids(cg) if p not in found})
    if listening:
        ports = (layout.REPO_PORT, layout.IMDS_PORT, layout.S3_PORT, layout.PROMETHEUS_PORT)
        for addr, pid in machine.listeners(layout.BRIDGE_IP, ports).items():
            found[pid] = f"listening on {addr}"
    return {pid: note for pid, note in found.items() if pid == 0 or machine.pid_alive(pid)}


def _our_processes(state: dict | None = None) -> list[int]:
    """The processes of ours to stop (see :func:`_processes`)."""
    me = os.getpid()
    return sorted(p for p in _processes(load_state() if state is None else state, listening=False) if p != me)


def _kill_pids(pids: Iterable[int]) -> None:
    machine.terminate(pids, sig=signal.SIGKILL)


def leftovers(state: dict | None = None) -> list[str]:
    """Everything of ours that exists on the machine, looked for (empty after ``down``): namespaces,
    links, mounts, cgroups, processes and listening sockets."""
    state = load_state() if state is None else state
    found = [f"netns {n}" for n in network.our_netns()]
    found += [f"link {n}" for n in network.our_links()]
    found += [f"mount {m}" for m in machine.mounts_under(layout.STATE_DIR)]
    found += [f"cgroup {c}" for c in find_cgroups(state)]
    for pid, note in sorted(_processes(state).items()):
        what = f"process {pid or '?'} {machine.cmdline(pid)[:80] if pid else ''}".rstrip()
        found.append(f"{what} ({note})" if note else what)
    return found


def clean_runtime(state: dict) -> list[str]:
    """Stop everything of any sandbox that runs or is mounted (current or stale from a killed session);
    hosts' disks and the state stay. Returns what it found."""
    found = leftovers(state)
    for h in hosts_from_state(state):
        stop_host(h, timeout=10)
    services.stop_services(state)
    _kill_pids(_our_processes(state))
    network.remove_all()
    machine.umount_under(layout.STATE_DIR)
    for cg in find_cgroups(state) + cgroups.parents():
        _kill_pids(cgroups.cgroup_pids(cg))
        cgroups.remove_tree(cg)
    return found


def _discard() -> None:
    """Hosts' disks and the state (after :func:`clean_runtime`)."""
    shutil.rmtree(layout.STATE_DIR / "hosts", ignore_errors=True)
    for d in (layout.monitoring_dir(), layout.STATE_DIR / "prometheus-data"):
        shutil.rmtree(d, ignore_errors=True)
    for f in (state_file(), imds_hosts_file(), known_hosts_path()):
        f.unlink(missing_ok=True)


def cleanup_all() -> list[str]:
    """Remove every trace of any sandbox, disks included. Returns what it found running or mounted."""
    found = clean_runtime(load_state())
    _discard()
    return found


# ---------------------------------------------------------------------------------------------
# Up
# ---------------------------------------------------------------------------------------------


#: The load balancer ``sandbox up`` adds (``--no-lb``: none): a general-purpose instance type, no accelerator;
#: ``inventories/sandbox.py`` puts it in the ``lb`` group (deploys/lb.py runs HAProxy on it).
LB_NAME = "sbx-lb"
LB_TYPE = "c6i.large"


def default_specs(n: int, types: Sequence[str], *, lb: bool = False) -> list[HostSpec]:
    """``n`` hosts of ``types`` (one type for all, or one per host; default inf2.xlarge); ``lb``: plus the load
    balancer host :data:`LB_NAME`, unless a type given is already one without an accelerator."""
    if not types:
        types = ["inf2.xlarge"]
    if n and len(types) == 1:
        types = list(types) * n
    elif n and n != len(types):
        raise SandboxError(f"--hosts {n} does not match the {len(types)} instance types given ({', '.join(types)})")
    specs = [HostSpec(instance_type=t) for t in types]
    if lb and all(catalog.get(t).has_accelerator for t in types):
        specs.append(HostSpec(instance_type=LB_TYPE, name=LB_NAME))
    return specs


def _assign_names(specs: list[HostSpec]) -> list[HostSpec]:
    seen = set()
    for i, s in enumerate(specs, 1):
        if not s.name:
            s.name = f"sbx-{i:02d}"
        if s.name in seen:
            raise SandboxError(f"duplicate sandbox host name {s.name}")
        if len(layout.NETNS_PREFIX + s.name) > 30 or not s.name.replace("-", "").isalnum():
            raise SandboxError(f"bad sandbox host name {s.name!r} (letters, digits and '-', at most 27 characters)")
        seen.add(s.name)
        catalog.get(s.instance_type)  # unknown types fail here, before anything is built
    return specs


def up(specs: list[HostSpec]) -> dict:
    """Bring the fleet to ``specs`` (idempotent): start missing hosts, start stopped ones again with their
    disks, replace hosts wanted differently. Returns the state.

    A failed bring-up of a fleet with nothing running removes whatever it had started and the hosts it
    created (nothing half-built); stopped hosts keep their disks."""
    specs = _assign_names(list(specs))
    if len(specs) > 200:
        raise SandboxError("at most 200 sandbox hosts")
    check_prerequisites()
    with locked():
        before = load_state()
        had_hosts = any(alive(h) for h in hosts_from_state(before))
        try:
            return _up(specs)
        except BaseException:
            if not had_hosts:
                _undo_up(set(_host_names(before)))
            raise


def built_elsewhere(h: HostState, cache: Path) -> bool:
    """``h`` was built from a base image outside ``cache`` (another ``TRITONFLEET_CACHE``): the keyring of the mirror
    it trusts and the images it loads are that cache's, which the sandbox's services no longer serve."""
    return bool(h.base) and not Path(h.base).resolve().is_relative_to(Path(cache).resolve())


def _undo_up(kept: set[str]) -> None:
    state = load_state()
    clean_runtime(state)
    for name in set(_host_names(state)) - kept:
        state["hosts"].pop(name)
    hosts_dir = layout.STATE_DIR / "hosts"
    for d in hosts_dir.iterdir() if hosts_dir.is_dir() else ():
        if d.name not in state["hosts"]:
            shutil.rmtree(d, ignore_errors=True)
    if state["hosts"]:
        state["services"] = {}
        save_state(state)
    else:
        _discard()


def _new_host(spec: HostSpec, used: set[str]) -> HostState:
    octet = layout.FIRST_HOST_OCTET
    while f"{layout.SUBNET_PREFIX}{octet}" in used:
        octet += 1
    ip = f"{layout.SUBNET_PREFIX}{octet}"
    used.add(ip)
    iid = "i-0" + hashlib.sha256(f"{spec.name}/{ip}".encode()).hexdigest()[:16]
    return HostState(name=spec.name, ip=ip, instance_type=spec.instance_type, instance_id=iid, spec=spec.key())


def _up(specs: list[HostSpec]) -> dict:
    t0 = time.monotonic()
    state = load_state()
    state.setdefault("hosts", {})
    known = {h.name: h for h in hosts_from_state(state)}
    live = {name: h for name, h in known.items() if alive(h)}
    if not live or not network.bridge_exists():
        # Nothing of ours is running: whatever runs or is mounted is stale (a killed session, a reboot of
        # this machine). Stop it all; hosts' disks stay.
        stale = clean_runtime(state)
        if stale:
            log(f"cleaned {len(stale)} stale leftovers of an earlier sandbox")
        state["services"], live = {}, {}
    wanted = {s.name: s for s in specs}
    # Hosts no longer wanted, wanted differently or built from another cache go with their disks.
    for name, gone in known.items():
        elsewhere = built_elsewhere(gone, layout.CACHE_DIR)
        if name not in wanted or gone.spec != wanted[name].key() or elsewhere:
            why = f" (built from another cache, {gone.base}: its mirror key and images are not this one's)"
            log(f"removing host {name}{why if elsewhere else ''}")
            remove_host(gone)
            state["hosts"].pop(name)
            live.pop(name, None)
    save_state(state)
    network.check_subnet_free()
    # the host base image and the images' base layer side by side (each a mmdebstrap run on an empty cache; `make
    # test` starts the two in the background before pip: prefetch.py)
    base = prefetch(keep={h.base for h in hosts_from_state(state) if h.base})
    ensure_client_key()
    supplies = services.ensure_supplies(base)
    network.ensure_bridge()
    ensure_services(state)
    used = {h.ip for h in hosts_from_state(state)}
    started: list[tuple[HostState, HostSpec, bool]] = []
    for spec in specs:
        if spec.name in live:
            continue
        h: HostState | None = host_state(state["hosts"][spec.name]) if spec.name in state["hosts"] else None
        fresh = not (h and has_disk(h) and (not h.base or Path(h.base).is_dir()))
        try:
            if h is None:
                h = _new_host(spec, used)
                shutil.rmtree(h.dir, ignore_errors=True)
                log(f"starting host {h.name} ({spec.instance_type}) at {h.ip}")
                create_host(h, spec, base, supplies)
            elif fresh:
                log(f"host {h.name} lost its disk or base image; creating it again")
                remove_host(h)
                create_host(h, spec, base, supplies)
            else:
                log(f"host {h.name} is stopped; starting it with its disk")
                stop_host(h)  # what is left of its last run
                start_host(h, Path(h.base or base))
        except Exception:
            if h is not None:  # _new_host itself failed: nothing to stop, and the error is its own
                stop_host(h)
            raise
        state["hosts"][h.name] = dataclasses.asdict(h)
        save_state(state)
        started.append((h, spec, fresh))
    all_hosts = hosts_from_state(state)
    write_known_hosts(all_hosts)
    _write_imds(all_hosts)
    for h, spec, fresh in started:
        wait_host(h)
        if fresh:
            preinstall(h, spec.preinstall)
    state.setdefault("repository_secret", secrets.token_urlsafe(24))
    state["supplies"] = {
        "image_archive": str(supplies["image_archive"]),
        "repos": {k: _repo_dict(v) for k, v in supplies["repos"].items()},
        "pypi": supplies.get("pypi"),
    }
    save_state(state)
    counts = services.write_monitoring_targets()
    log(f"Prometheus at {layout.prometheus_url()} scrapes {sum(counts.values())} target(s)")
    log(f"fleet up: {len(all_hosts)} host(s) in {time.monotonic() - t0:.1f}s")
    return state


def _write_imds(hosts: Sequence[HostState]) -> None:
    """The IMDS stand-in's hosts file (it answers by client IP), in one rename."""
    write_atomic(imds_hosts_file(), json.dumps({
        h.ip: {"instance_type": h.instance_type, "instance_id": h.instance_id,
               "availability_zone": "us-east-1a", "hostname": h.name, "local_ipv4": h.ip}
        for h in hosts}, indent=2).encode())


def _repo_dict(info) -> dict:
    d = dataclasses.asdict(info) if dataclasses.is_dataclass(info) and not isinstance(info, type) else dict(info)
    return {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}


# ---------------------------------------------------------------------------------------------
# Reset, down, status
# ---------------------------------------------------------------------------------------------


def reset_host(name: str, *, instance_id: str | None = None) -> HostState:
    """Give host ``name`` a fresh root (same name, IP, type and spec): for tests that need a bare host.
    ``instance_id``: the instance id its metadata service gives from now on (the one it had, by default)."""
    (h,) = reset_hosts([name], instance_id=instance_id)
    return h


def reset_hosts(names: Sequence[str], *, instance_id: str | None = None) -> list[HostState]:
    """Give each host of ``names`` a fresh root (:func:`reset_host`): the roots are made one after the other under
    the sandbox's lock, then the hosts boot and get their preinstalled packages at the same time."""
    made = _remake(names, instance_id, None)

    def ready(item: tuple[HostState, HostSpec]) -> HostState:
        h, spec = item
        wait_host(h)
        preinstall(h, spec.preinstall)
        return h

    if len(made) == 1:
        return [ready(made[0])]
    with ThreadPoolExecutor(max_workers=len(made)) as pool:  # each boot waits on its own host
        return list(pool.map(ready, made))


def _remake(names: Sequence[str], instance_id: str | None,
            then: Callable[[Path], None] | None) -> list[tuple[HostState, HostSpec]]:
    """Fresh roots for ``names``, under the sandbox's lock (:func:`reset_hosts`); ``then(root)`` writes more into
    each before it boots (:func:`boot_host`); the hosts start booting."""
    if instance_id is not None and (len(names) != 1 or not re.fullmatch(r"i-[0-9a-f]{8,17}", instance_id)):
        raise SandboxError(f"instance id {instance_id!r}: expected one host and an id like i-0123456789abcdef0")
    made: list[tuple[HostState, HostSpec]] = []
    with locked():
        state = load_state()
        for name in names:
            h = get_host(name, state)
            spec = HostSpec(**h.spec)
            remove_host(h)
            if instance_id is not None:
                h.instance_id = instance_id
            base = ensure_base(keep={x.base for x in hosts_from_state(state) if x.base})
            supplies = services.ensure_supplies(base)
            create_host(h, spec, base, supplies, then)
            state["hosts"][name] = dataclasses.asdict(h)
            made.append((h, spec))
        save_state(state)
        write_known_hosts(hosts_from_state(state))
        if instance_id is not None:
            _write_imds(hosts_from_state(state))
    return made


def boot_host(name: str, user_data: bytes, *, instance_id: str | None = None) -> HostState:
    """Give host ``name`` a fresh disk and boot it from ``user_data``, once, as cloud-init runs a launch template's
    (:mod:`.cloudinit`); ``instance_id``: the id it boots as (e.g. an instance of moto's Auto Scaling group).
    Returns when its sshd answers, with the user data running: :func:`wait_user_data` waits for its end. The
    packages its spec preinstalls are not installed (dpkg would race the user data's own apt)."""
    cloudinit.check_user_data(user_data)
    with locked():  # a bundle's wheels and the AWS CLI's: downloaded once, then served by the sandbox's PyPI
        wheels = pypi.fetch_host_wheels(layout.CACHE_DIR / "repo-cache", PROJECT)
    ((h, _spec),) = _remake([name], instance_id, lambda root: cloudinit.prepare(root, user_data, wheels))
    machine.wait_port(h.ip, 22, 60, f"host {h.name} sshd", h.nspawn_pid)
    return h


def wait_user_data(name: str, timeout: float, *, say: Callable[[str], None] = log) -> str:
    """Wait, at most ``timeout`` s, for the user data :func:`boot_host` started on ``name``; its result line."""
    h = get_host(name)
    return cloudinit.wait_boot(lambda command: ssh(h, command, check=False, timeout=30).stdout, timeout, say=say)


def down() -> list[str]:
    """Tear everything down, disks included. Returns what is still left, looked for (should be empty)."""
    if os.geteuid() != 0:
        raise SandboxError("the sandbox needs root")
    with locked():
        state = load_state()
        for h in hosts_from_state(state):
            log(f"stopping host {h.name}")
            stop_host(h, discard=True)  # the disks go below: no clean shutdown
        clean_runtime(state)
        _discard()
        return leftovers(state)


def status() -> list[dict]:
    rows = []
    for h in hosts_from_state(load_state()):
        rows.append({"name": h.name, "ip": h.ip, "instance_type": h.instance_type, "instance_id": h.instance_id,
                     "state": "running" if alive(h) else "stopped"})
    return rows


def get_host(name: str, state: dict | None = None) -> HostState:
    state = load_state() if state is None else state
    if name not in state.get("hosts", {}):
        raise SandboxError(f"no sandbox host {name}")
    return host_state(state["hosts"][name])
