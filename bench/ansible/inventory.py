"""The Ansible inventory for ``bench/ansible/serve.yml``, computed by tritonfleet itself.

Every value the playbook applies comes from the same functions the pyinfra roles call, after the same
validation (``tritonfleet.config.load_host_config`` with every registered role, as ``roles/preflight.py``
does): package pins (``roles.neuron.package_pins``, ``tritonfleet.compat``), file contents (the roles'
templates: limits, profile, daemon.json), repository lines and keyring paths, the agent's wheelhouse and
its ``sync`` command, the compatibility table, and each Triton container: ``roles.triton.run_args`` and
``server_command`` (plus the spec label) are parsed into ``community.docker.docker_container`` parameters,
so both tools describe the identical container. Bad host data fails here, with preflight's own message.

    python bench/ansible/inventory.py                       # every running sandbox host, JSON on stdout
    python bench/ansible/inventory.py --hosts bench-1,bench-2 -o /tmp/inv.json

The output holds the repository secret (as the pyinfra inventory does): it is written 0600.

What the playbook does not express (raises :class:`NotExpressed` here instead of doing something else):
``triton_image_source: build``, ECR pulls through the credential helper, ``triton_image_archive_src``,
``models_source`` (the
controller-copy repository with its staged switch and model gate) and dnf platforms. With ``qa_suites`` (the
sandbox sets it) serve.py installs the agent with its QA extra; the generator resolves that wheelhouse for
the platform's Python and the controller's machine, and the playbook checks the host has those.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from roles import agent as agent_role  # noqa: E402
from roles import all_roles  # noqa: E402
from roles import efa as efa_role  # noqa: E402
from roles import models as models_role  # noqa: E402
from roles import neuron as neuron_role  # noqa: E402
from roles import nvidia as nvidia_role  # noqa: E402
from roles import triton as triton_role  # noqa: E402
from roles.docker import daemon_config  # noqa: E402
from roles.platform import APT_KEYRINGS  # noqa: E402
from tritonfleet import compat, wheelhouse  # noqa: E402
from tritonfleet import hostcontract as hc  # noqa: E402
from tritonfleet.config import HostConfig, load_host_config  # noqa: E402
from tritonfleet.platforms import PLATFORMS  # noqa: E402
from tritonfleet.templating import render, template_path  # noqa: E402

#: The apt platforms the playbook supports, as Ansible's facts name them (distribution, version).
APT_PLATFORMS = [[key[0], key[1]] for key, p in PLATFORMS.items() if p.family == "apt"]
#: Package names are computed with this platform's table; every apt platform names them alike (the
#: playbook checks the host runs one of APT_PLATFORMS; the codename and kernel come from its facts).
NAMES_FROM = PLATFORMS[("debian", "12")]
#: What Ansible's own modules need on the hosts (not part of tritonfleet's state): python3-apt for the apt
#: module (it would install it by itself), requests for community.docker's Docker API client.
ANSIBLE_REQUIREMENTS = ["python3-apt", "python3-requests"]


class NotExpressed(ValueError):
    """Host data asks for something the Ansible playbook does not do."""


# --- docker run options -> community.docker.docker_container parameters -------------------------------------

def container_params(name: str, image: str, run_args: list[str], command: list[str]) -> dict[str, Any]:
    """``docker run`` options as tritonfleet writes them (``roles.triton.run_args``) -> docker_container
    parameters. Every option run_args can produce is mapped; anything else is an error, never dropped."""
    p: dict[str, Any] = {"name": name, "image": image, "command": list(command), "devices": [], "ulimits": [],
                         "volumes": [], "env": {}, "published_ports": [], "labels": {}}
    args = list(run_args)
    while args:
        flag = args.pop(0)
        if not args:
            raise ValueError(f"{flag}: no value")
        value = args.pop(0)
        if flag == "--restart":
            p["restart_policy"] = value
        elif flag == "--device":
            p["devices"].append(value)
        elif flag == "--gpus":
            spec = value.strip('"')
            # exactly as the docker CLI sends --gpus (docker_container compares every field: "" is not None)
            request = {"driver": "", "count": -1, "capabilities": [["gpu"]], "options": {}}
            if spec.startswith("device="):
                request.update(count=0, device_ids=spec[7:].split(","))
            elif spec != "all":
                raise ValueError(f"--gpus {value}: not a device list")
            p["device_requests"] = [request]
        elif flag == "--ulimit":
            kind, _, limits = value.partition("=")
            soft, _, hard = limits.partition(":")
            p["ulimits"].append(f"{kind}:{soft}:{hard or soft}")
        elif flag == "--shm-size":
            p["shm_size"] = value
        elif flag == "-v":
            p["volumes"].append(value)
        elif flag == "-e":
            key, _, val = value.partition("=")
            p["env"][key] = val
        elif flag == "--network":
            p["network_mode"] = value
        elif flag == "-p":
            p["published_ports"].append(value)
        elif flag == "--label":
            key, _, val = value.partition("=")
            p["labels"][key] = val
        else:
            raise ValueError(f"docker run option {flag} is not mapped to docker_container")
    return {k: v for k, v in p.items() if v not in ([], {})}


def containers(cfg: HostConfig, image: str) -> list[dict[str, Any]]:
    """One entry per placed server: docker_container parameters, health URL and the host record."""
    t = cfg.triton
    out = []
    for p in t.placements:
        args, cmd = triton_role.run_args(cfg, p), triton_role.server_command(cfg, p)
        digest = triton_role.spec_hash(image, args, cmd)
        args = args + ["--label", f"{hc.LABEL_SPEC}={digest}"]
        record = hc.ServerRecord(name=p.name, image=image, spec=digest,
                                 run_args=hc.redact(args, t.repository_secret),
                                 command=hc.redact(cmd, t.repository_secret))
        out.append({"name": p.name, "url": p.local_url, "spec": digest,
                    "params": container_params(p.name, image, args, cmd),
                    "record": json.loads(record.to_json()), "record_path": hc.record_path(p.name)})
    return out


# --- per host ----------------------------------------------------------------------------------------------

def _apt_pins(pins: dict[str, str | None]) -> list[str]:
    return [f"{n}={v}" if v else n for n, v in pins.items()]


def _min_driver_by_runtime_series() -> dict[str, str]:
    """Runtime-lib major.minor -> the driver of the same SDK release (``compat.min_driver_for_runtime``)."""
    out = {}
    for versions in compat.NEURON_RELEASES.values():
        runtime, driver = versions.get(compat.RUNTIME_LIB), versions.get(compat.DKMS)
        if runtime and driver:
            out[".".join(map(str, compat.parse_version(runtime).series(2)))] = driver
    return out


def tf_vars(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """Everything serve.yml applies to host ``name``, validated like preflight validates it."""
    cfg = load_host_config(name, data, all_roles(), platform=NAMES_FROM)
    t, m = cfg.triton, cfg.models
    if m.source:
        raise NotExpressed(f"{name}: models_source (controller copy, staged switch, model gate) is not in the playbook")
    if t.image_archive_src:
        raise NotExpressed(f"{name}: triton_image_archive_src (upload from the controller) is not in the playbook")
    source = triton_role.image_source(cfg)
    image = triton_role.image_ref(cfg)
    if source == "build" or (source == "pull" and triton_role.ECR_REGISTRY.match(image) and t.ecr_credential_helper):
        raise NotExpressed(f"{name}: triton_image_source {source!r} ({image}) is not in the playbook")
    kernel = "{{ ansible_kernel }}"
    need_agent, qa = agent_role.wanted(cfg)
    out: dict[str, Any] = {
        "platforms": APT_PLATFORMS,
        "ansible_requirements": ANSIBLE_REQUIREMENTS,
        "base": {
            "dirs": [hc.STATE_DIR, hc.OPT_DIR],
            "packages": NAMES_FROM.packages_for(cfg.base.packages),
            "hide_processes": cfg.base.hide_processes,
            "files": {"/etc/security/limits.d/90-tritonfleet-memlock.conf":
                      render("base/limits-memlock.conf.j2", limit=cfg.base.memlock_limit)},
        },
        "sysctl": {"file": "/etc/sysctl.d/90-tritonfleet.conf",
                   "content": ("# Managed by tritonfleet (roles/sysctl.py)\n" + "".join(
                       f"{k} = {v}\n" for k, v in sorted(cfg.sysctl.params.items()))) if cfg.sysctl.params else ""},
        "neuron": {"enabled": cfg.instance.is_neuron},
        "efa": {"enabled": efa_role.wanted(cfg)},
        "nvidia": {"enabled": cfg.instance.is_gpu},
        "docker": {
            "package": NAMES_FROM.package(cfg.docker.package or "docker"),
            "data_root": cfg.docker.data_root,
            "files": {"/etc/docker/daemon.json": render("docker/daemon.json.j2", config=daemon_config(cfg))},
        },
        "agent": {"enabled": need_agent},
        "models": {"mode": "direct" if m.s3_uri and m.s3_direct else "s3" if m.s3_uri else "none", "dir": m.dir},
        "triton": {"image": image, "source": source, "archive": t.image_archive},
    }
    if cfg.instance.is_neuron:
        n = cfg.neuron
        keyring = f"{APT_KEYRINGS}/{neuron_role.REPO_ID}.gpg"
        suite = n.apt_suite or "{{ ansible_distribution_release }}"
        out["neuron"] = {
            "enabled": True,
            "key": {"url": n.effective_key_url(), "fingerprint": n.key_fingerprint.replace(" ", "").upper(),
                    "dest": keyring},
            "source": {"path": f"/etc/apt/sources.list.d/{neuron_role.REPO_ID}.list",
                       "content": f"deb [signed-by={keyring}] {n.apt_url} {suite}"
                                  + ("" if suite.endswith("/") else " main") + "\n"},
            "remove_legacy": n.remove_legacy,
            "legacy_packages": neuron_role.LEGACY_PACKAGES,
            "packages": ([NAMES_FROM.package("kernel-headers", kernel=kernel)] if n.kernel_headers else [])
                        + _apt_pins(neuron_role.package_pins(cfg)),
            "headers_package": NAMES_FROM.package("kernel-headers", kernel=kernel),
            "files": {"/etc/modules-load.d/neuron.conf": "neuron\n",
                      "/etc/profile.d/neuron.sh": render("neuron/profile.sh.j2", bin_dir=neuron_role.NEURON_BIN)},
            "devices": cfg.instance.device_count,
        }
    if out["efa"]["enabled"]:
        e = cfg.efa
        out["efa"].update({"script": str(template_path("scripts/efa-install.sh")),
                           "args": [e.installer_url, e.effective_signature_url(), e.key_url,
                                    e.key_fingerprint.replace(" ", "").upper()]})
    if cfg.instance.is_gpu:
        v = cfg.nvidia
        keyring = f"{APT_KEYRINGS}/{nvidia_role.REPO_ID}.gpg"
        driver = v.driver_package.format(branch=v.driver_branch) if v.driver_package else "nvidia-driver"
        out["nvidia"] = {
            "enabled": True,
            "key": {"url": v.effective_key_url(), "fingerprint": v.key_fingerprint.replace(" ", "").upper(),
                    "dest": keyring},
            "source": {"path": f"/etc/apt/sources.list.d/{nvidia_role.REPO_ID}.list",
                       "content": f"deb [signed-by={keyring}] {v.toolkit_apt_url} /\n"},
            "packages": [NAMES_FROM.package(driver, branch=v.driver_branch)]
                        + _apt_pins({nvidia_role.TOOLKIT: v.toolkit_version}),
            "gpus": cfg.instance.device_count,
        }
    if need_agent:
        # With QA the wheelhouse is resolved for one host Python and machine (roles/agent.py asks the host;
        # here they are the platform's Python and the controller's machine, and the playbook checks the host).
        platform = getattr(agent_role, "platform_wheels", lambda _cfg: qa)(cfg)  # QA, or live reloads (gRPC)
        qa_for = (NAMES_FROM.python, os.uname().machine) if platform else None
        wh = wheelhouse.build(qa_for)
        # the extras roles/agent.py asks for (older checkouts: QA's, per host Python where qa_extras exists)
        extras = getattr(agent_role, "extras", None)(cfg, qa_for[0]) if qa_for and hasattr(agent_role, "extras") \
            else getattr(wheelhouse, "qa_extras", lambda _python: "qa")(qa_for[0]) if qa_for else ""
        out["agent"].update({
            "python": cfg.agent.python, "pythons": list(wheelhouse.PYTHONS), "venv": hc.AGENT_VENV,
            "qa_for": list(qa_for) if qa_for else None,
            "wheelhouse_src": str(wh.path), "wheelhouse_dir": hc.WHEELHOUSE_DIR, "digest": wh.digest,
            "requirement": f"{wheelhouse.PACKAGE}{f'[{extras}]' if extras else ''}=={wh.version}",
        })
    if out["models"]["mode"] == "s3":
        header = models_role.repository_header(cfg)
        out["models"].update({
            "header_file": hc.REPOSITORY_HEADER_FILE if header and t.model_control_mode == "explicit" else None,
            "header": header or "",
            "sync_argv": models_role.sync_command(cfg),
        })
    models = triton_role.model_names(cfg)
    out["triton"].update({
        "keep": [p.name for p in t.placements],
        "containers": containers(cfg, image),
        "models": models,
        "health_timeout": t.health_timeout,
        "neuron_gate": cfg.instance.is_neuron,
        "runtime_label": hc.LABEL_IMAGE_RUNTIME,
        "runtime_from_data": triton_role.container_runtime_version(cfg),
        "neuron_arch": cfg.instance.neuron_arch,
        "inf1_driver_series": ".".join(map(str, compat.parse_version(compat.INF1_DKMS_PIN).parts)),
        "min_driver_by_runtime_series": _min_driver_by_runtime_series(),
        "role_filter": f"{hc.LABEL_ROLE}={hc.ROLE_TRITON}",
    })
    return out


def connection_vars(data: dict[str, Any], cfg_keepalive: int, dead_after: int) -> dict[str, Any]:
    """pyinfra's SSH data -> Ansible's connection variables (strict host keys; keepalives like roles/connection.py)."""
    opts = [f"-o ServerAliveInterval={cfg_keepalive}", f"-o ServerAliveCountMax={max(1, dead_after // cfg_keepalive)}"]
    if data.get("ssh_known_hosts_file"):
        opts.append(f"-o UserKnownHostsFile={shlex.quote(data['ssh_known_hosts_file'])}")
    if data.get("ssh_strict_host_key_checking"):
        opts.append(f"-o StrictHostKeyChecking={data['ssh_strict_host_key_checking']}")
    out = {"ansible_host": data.get("ssh_hostname"), "ansible_user": data.get("ssh_user", "root"),
           "ansible_ssh_common_args": " ".join(opts)}
    if data.get("ssh_key"):
        out["ansible_ssh_private_key_file"] = data["ssh_key"]
    if data.get("ssh_port"):
        out["ansible_port"] = data["ssh_port"]
    return {k: v for k, v in out.items() if v is not None}


def inventory(hosts: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """An Ansible YAML/JSON inventory (group ``tritonfleet``) for pyinfra-style ``[(name, data), ...]``."""
    roles = all_roles()
    out: dict[str, Any] = {}
    for name, data in hosts:
        cfg = load_host_config(name, data, roles, platform=NAMES_FROM)
        out[name] = {**connection_vars(data, cfg.connection.keepalive, cfg.connection.dead_after),
                     "tf": tf_vars(name, data)}
    return {"all": {"children": {"tritonfleet": {"hosts": out}}}}


def write(path: Path, hosts: list[tuple[str, dict[str, Any]]]) -> Path:
    """Write the inventory for ``hosts`` to ``path`` (0600: it holds the repository secret)."""
    text = json.dumps(inventory(hosts), indent=1, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", help="comma-separated sandbox host names (default: every running sandbox host)")
    ap.add_argument("-o", "--output", type=Path, help="write here (0600) instead of stdout")
    args = ap.parse_args(argv)
    from tritonfleet.sandbox.inventory import sandbox_hosts

    hosts = sandbox_hosts(args.hosts.split(",") if args.hosts else None)
    if args.output:
        write(args.output, hosts)
    else:
        print(json.dumps(inventory(hosts), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
