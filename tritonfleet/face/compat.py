"""``tritonfleet compat``: the compatibility chain (docs/compatibility.md) per host and model, before a deploy.

    tritonfleet compat --inventory inventories/inf2.py [--models DIR|s3://bucket/prefix] [--json]

Per host of the inventory (its data validated as preflight validates it), one SSH command reads the running
kernel, the ``aws-neuronx-dkms`` package, whether DKMS built it for that kernel and the loaded module's version
(:mod:`tritonfleet.access.hostprobe`, the NeuronState fact's own command), the NVIDIA driver on GPU hosts, and the
labels of the Triton image the host's data names (:func:`tritonfleet.imagespec.image_ref`, computed as the triton
role computes it; ``docker image inspect``). Where the image carries no framework label (or one with wildcard
pins) it is read from the image itself (``pip list`` in a throw-away container without network). An image that is
not on the host yet is judged by what the data says it will hold: the built image's labels follow from the data,
a pulled one's runtime from ``triton_neuron_runtime_version`` (else the release's).

The links judged (:mod:`tritonfleet.compat`): kernel -> driver, driver -> runtime, framework -> runtime, and with
``--models`` runtime -> model for every model the host loads (its compiler and NEFF versions read from its
artifacts, :mod:`tritonfleet.agent.artifacts`); on GPU hosts, NVIDIA driver -> image. Where the deploy would
install another driver than the host has (the neuron role's pin), the driver's links are judged for both.

Output: a table ``host | subject | link | verdict | what was found: the fix`` and a summary line (``--json``: the
same as JSON). Exit code 1 when any link fails; warnings (anything the table cannot judge) are shown and do not
fail. Bad input (no such inventory, bad host data, no such repository) is one line; an unreachable host is a
failed row naming it.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from tritonfleet import compat as rules
from tritonfleet import hostcontract as hc
from tritonfleet import imagespec
from tritonfleet.access import hostprobe
from tritonfleet.agent import artifacts
from tritonfleet.platforms import PLATFORMS

logger = logging.getLogger(__name__)

#: The link name of rows that are no link of the chain: the image judged, and a host out of reach.
IMAGE = "image"
SSH = "ssh"
#: Seconds the one SSH command of a host may take (``pip list`` in the image included).
PROBE_TIMEOUT = 180
#: Bytes of one S3 artifact read per range: a NEFF's header and the part of its tarball the reader looks at; a
#: zip's end (its central directory); each zip member's start (the reader searches that much of it).
NEFF_HEAD = artifacts.NEFF_HEADER_SIZE + artifacts.MAX_PAYLOAD + 64 * 1024
ZIP_TAIL = artifacts.MAX_ZIP_DIRECTORY + 64 * 1024 + 22
#: Bytes of zip members fetched per artifact, all together (the reader reads at most MAX_READ of a file).
ZIP_MEMBERS = artifacts.MAX_READ + 256 * 1024
_LOCAL_HEADER_SLACK = 30 + 1024  # a member's local header: 30 bytes, its name and an extra field of its own
_TENSOR = re.compile(r"(?:^|/)(data|constants)/(\d+)$")


class CompatError(ValueError):
    """Bad input to ``compat`` (one line)."""


# -- what a host has, and its findings ------------------------------------------------------------------------

def _sections(text: str) -> dict[str, list[str]]:
    """The probe's output split at its ``%%<part>`` lines (the parts keep their own lines, blank ones too)."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("%%"):
            current = line[2:].strip()
            out[current] = []
        else:
            out.setdefault(current, []).append(line)
    return out


def probe_command(images: list[str], neuron: bool, gpu: bool) -> str:
    """The one shell command that reads a host: its OS, the Neuron stack (:data:`hostprobe.NEURON_COMMAND`) or the
    NVIDIA driver, and each of ``images``' labels (and, on Neuron hosts, ``pip list`` in an image whose framework
    label is missing or holds wildcard pins). Docker needs root: run it as root."""
    parts = ["echo '%%os'; (. /etc/os-release 2>/dev/null; echo \"${ID:-} ${VERSION_ID:-}\")"]
    if neuron:
        parts.append(f"echo '%%neuron'; ({hostprobe.NEURON_COMMAND})")
    if gpu:
        parts.append(f"echo '%%nvidia'; ({hostprobe.NVIDIA_COMMAND})")
    fw_format = shlex.quote(f'{{{{index .Config.Labels "{hc.LABEL_IMAGE_FRAMEWORKS}"}}}}')
    for image in images:
        q = shlex.quote(image)
        parts.append(f"printf '%s\\n' {shlex.quote('%%image ' + image)}; "
                     f"docker image inspect --format '{{{{json .Config.Labels}}}}' {q} 2>/dev/null || echo '(absent)'")
        if neuron:
            parts.append(
                f"fw=$(docker image inspect --format {fw_format} {q} 2>/dev/null) && case \"$fw\" in "
                f"''|'<no value>'|*'*'*) printf '%s\\n' {shlex.quote('%%pip ' + image)}; "
                f"timeout 120 docker run --rm --network none --entrypoint python3 {q} -m pip list --format=json "
                "2>/dev/null | head -c 2000000; echo;; esac")
    return "; ".join(parts) + "; true"


def parse_probe(text: str) -> dict[str, Any]:
    """What :func:`probe_command` printed: ``os`` (``(id, version)``), ``neuron`` (the NeuronState value) or
    None, ``nvidia`` (the NvidiaSmi value) or None, ``images`` ({image: labels, None when absent}) and ``pip``
    ({image: {package: version}})."""
    parts = _sections(text)
    os_words = (" ".join(parts.get("os", [])).split() + ["", ""])[:2]
    images: dict[str, dict[str, str] | None] = {}
    pip: dict[str, dict[str, str]] = {}
    for key, lines in parts.items():
        body = "\n".join(lines).strip()
        if key.startswith("image "):
            labels: Any = None
            if body and body != "(absent)":
                try:
                    labels = json.loads(body) or {}
                except ValueError:
                    labels = {}
            images[key[len("image "):]] = labels if labels is None else {
                str(k): str(v) for k, v in dict(labels).items()}
        elif key.startswith("pip "):
            try:
                listed = json.loads(body) if body else []
                pip[key[len("pip "):]] = {str(p["name"]).lower().replace("_", "-"): str(p["version"])
                                          for p in listed if isinstance(p, dict) and "name" in p and "version" in p}
            except (ValueError, TypeError):
                pass
    return {
        "os": (os_words[0].lower(), os_words[1]),
        "neuron": hostprobe.parse_neuron(parts["neuron"]) if "neuron" in parts else None,
        "nvidia": (hostprobe.parse_nvidia(parts["nvidia"]) if any(x.strip() for x in parts["nvidia"])
                   else hostprobe.nvidia_default()) if "nvidia" in parts else None,
        "images": images,
        "pip": pip,
    }


def _wildcard(versions: Mapping[str, str]) -> bool:
    return any("*" in v for v in versions.values())


def gathered(host: str, cfg: Any, probe: Mapping[str, Any] | None, *, unreachable: str | None = None
             ) -> dict[str, Any]:
    """The plain dict :func:`host_findings` judges: one host's data (``cfg``, validated) and what its probe read
    (:func:`parse_probe`; None with ``unreachable``, why it could not be read).

    Keys: ``host``, ``instance_type``, ``accelerator`` (``neuron`` | ``gpu`` | None), ``neuron_arch``, ``unreachable``;
    Neuron: ``kernel``, ``driver_package``, ``driver_loaded``, ``dkms_built``, ``planned_driver`` (the neuron role's
    pin); GPU: ``nvidia_driver``, ``nvidia_error``; the image: ``image``, ``image_present``, ``image_from`` (where its
    versions come from), ``runtime`` and ``frameworks`` (None: unknown); ``loads``: the models its servers load
    (None: every model of the repository)."""
    inst = cfg.instance
    accelerator = "neuron" if inst.is_neuron else "gpu" if inst.is_gpu else None
    out: dict[str, Any] = {"host": host, "instance_type": inst.name, "accelerator": accelerator,
                           "neuron_arch": inst.neuron_arch, "unreachable": unreachable}
    loads: set[str] = set()
    for p in cfg.triton.placements:
        if p.models is None or cfg.triton.model_control_mode != "explicit":
            loads = set()
            break
        loads.update(p.models)
    out["loads"] = sorted(loads) if loads else None
    if probe is None or accelerator is None:
        return out
    platform = PLATFORMS.get(tuple(probe["os"]))
    family = platform.family if platform is not None else None
    candidates = _image_candidates(cfg)
    present = {i: labels for i, labels in probe["images"].items() if labels is not None}
    image = candidates.get(family or "") or next((i for i in candidates.values() if i in present), None) \
        or candidates.get("apt") or next(iter(candidates.values()))
    out["image"] = image
    out["image_present"] = image in present
    builds = imagespec.image_source(cfg) == "build" and inst.is_neuron and not cfg.triton.image
    if accelerator == "neuron":
        state = probe.get("neuron") or {}
        for key in ("kernel", "driver_package", "driver_loaded", "dkms_built"):
            out[key] = state.get(key)
        from roles.neuron import dkms_pin

        out["planned_driver"] = dkms_pin(cfg)
        runtime, frameworks, where = _image_versions(cfg, present.get(image), probe["pip"].get(image), builds)
        out.update(runtime=runtime, frameworks=frameworks, image_from=where)
    else:
        smi = probe.get("nvidia") or hostprobe.nvidia_default()
        out["nvidia_driver"], out["nvidia_error"] = smi.get("driver"), smi.get("error")
        out.update(runtime=None, frameworks=None,
                   image_from="on the host" if out["image_present"] else "not on the host yet")
    return out


def _image_candidates(cfg: Any) -> dict[str, str]:
    """{package family: the image the data names there} (a built Neuron image's tag depends on the family's key
    file name; every other image is one name)."""
    return {family: imagespec.image_ref(cfg, imagespec.keyring_file_name(imagespec.NEURON_REPO, family))
            for family in ("apt", "dnf")}


def _image_versions(cfg: Any, labels: Mapping[str, str] | None, pip: Mapping[str, str] | None,
                    builds: bool) -> tuple[str | None, dict[str, str] | None, str]:
    """(runtime-lib, {framework: version}, where they come from) of a Neuron host's image: its labels, else what
    ``pip list`` in it said, else the data (the deploy gate's own fallbacks)."""
    declared = imagespec.runtime_version(cfg)
    if labels is not None:
        runtime = labels.get(hc.LABEL_IMAGE_RUNTIME) or declared
        from_label = hc.parse_frameworks_label(labels.get(hc.LABEL_IMAGE_FRAMEWORKS))
        frameworks: dict[str, str] | None = from_label or None
        fw_from = "its label" if from_label else "unknown"
        if pip and (not from_label or _wildcard(from_label)):
            frameworks = {k: v for k, v in pip.items() if k in rules.FRAMEWORK_KEY_PARTS} or frameworks
            fw_from = "pip list in it"
        rt_from = "its label" if labels.get(hc.LABEL_IMAGE_RUNTIME) else \
            "host data" if declared else "unknown"
        return runtime, frameworks, f"on the host; runtime from {rt_from}, frameworks from {fw_from}"
    if builds:
        return (imagespec.built_runtime(cfg), hc.parse_frameworks_label(hc.frameworks_label(imagespec.frameworks(cfg))),
                "not on the host yet: the deploy builds it, versions from its Dockerfile")
    return declared, None, "not on the host yet: runtime from host data, frameworks unknown"


def _ok(subject: str, link: str, line: str) -> rules.Finding:
    return rules.Finding(subject, link, rules.OK, line)


def _warn(subject: str, link: str, line: str, fix: str) -> rules.Finding:
    return rules.Finding(subject, link, rules.WARN, line, fix)


def _driver_runtime(subject: str, driver: str, runtime: str | None, arch: str | None) -> rules.Finding:
    if runtime:
        return rules.check_driver_runtime_finding(driver, runtime, arch, subject=subject)
    if arch == "inf1":
        if not rules.at_least(rules.INF1_DKMS_PIN, driver):
            return rules.Finding(subject, rules.DRIVER_RUNTIME, rules.FAIL,
                                 f"{rules.DKMS} {driver} does not support inf1 (the last inf1 driver is "
                                 f"{rules.INF1_DKMS_PIN})", f"pin {rules.DKMS}={rules.INF1_DKMS_PIN} on inf1 hosts")
        return _ok(subject, rules.DRIVER_RUNTIME, f"inf1: the runtime is inside the image's framework; {rules.DKMS} "
                                                  f"{driver} is of the inf1 line ({rules.INF1_DKMS_PIN})")
    return _warn(subject, rules.DRIVER_RUNTIME, f"the image's {rules.RUNTIME_LIB} version is unknown, so whether "
                                                f"{rules.DKMS} {driver} runs it is unknown",
                 f"label the image ({hc.LABEL_IMAGE_RUNTIME}) or set triton_neuron_runtime_version")


def _model_finding(name: str, infos: list[Any] | None, runtime: str | None, arch: str | None) -> rules.Finding:
    subject = f"model {name}"
    if infos is None:
        return _warn(subject, rules.RUNTIME_MODEL, "the host loads it, but the repository has no such model",
                     "check --models (or the host's triton_models / triton_servers[].models)")
    if not infos:
        return _ok(subject, rules.RUNTIME_MODEL, "no compiled artifact (*.neff, *.pt, *.pth, *.ts, *.torchscript) in "
                                                 "its version directories: nothing to judge")
    info = artifacts.summarize(infos)
    if info is None:
        first = infos[0]
        return _warn(subject, rules.RUNTIME_MODEL,
                     f"no compiler or NEFF version read from its {len(infos)} artifact(s) ({first.path}: "
                     f"{first.source})",
                     "a Neuron model: keep the compiler version with it (docs/compatibility-artifacts.md); a CPU "
                     "model needs nothing")
    return rules.check_model(name, info, runtime, neuron_arch=arch, subject=subject)


def host_findings(g: Mapping[str, Any], models: Mapping[str, list[Any]] | None = None) -> list[rules.Finding]:
    """Every link of one host's chain (``g``: :func:`gathered`), and with ``models`` ({model: its artifacts, as
    :func:`tritonfleet.agent.artifacts.scan_model` read them}) one runtime -> model row per model the host loads.
    Pure: a version the table cannot judge is a warning, never a pass."""
    host = f"host {g['host']}"
    if g.get("unreachable"):
        return [rules.Finding(host, SSH, rules.FAIL, f"not reachable: {g['unreachable']}",
                              "check the host's SSH settings in the inventory (ssh_hostname, ssh_user, ssh_key)")]
    out: list[rules.Finding] = []
    image = g.get("image") or "?"
    image_line = f"{image} ({g.get('image_from') or 'unknown'})"
    if g.get("image_present") or "builds it" in str(g.get("image_from")):
        out.append(_ok("image", IMAGE, image_line))
    else:
        out.append(_warn("image", IMAGE, image_line, "the deploy pulls or loads it; its versions are the data's"))
    if g.get("accelerator") == "gpu":
        driver = g.get("nvidia_driver")
        if not driver:
            out.append(_warn(host, rules.GPU_DRIVER_IMAGE, f"cannot read the NVIDIA driver version "
                                                           f"({g.get('nvidia_error') or 'nvidia-smi printed no GPU'})",
                             "install the NVIDIA driver (deploys/serve.py: the nvidia role) or check nvidia-smi"))
        else:
            out.append(rules.check_gpu(driver, image, subject=host))
        return out
    if g.get("accelerator") != "neuron":
        return out
    arch, runtime = g.get("neuron_arch"), g.get("runtime")
    installed, planned, kernel = g.get("driver_package"), g.get("planned_driver"), g.get("kernel")
    drivers: list[tuple[str, str, bool | None]] = []  # (subject, driver, dkms built)
    if installed:
        drivers.append((host, installed, g.get("dkms_built")))
    else:
        out.append(_warn(host, rules.KERNEL_DRIVER, f"no {rules.DKMS} on the host",
                         f"deploys/neuron.py (or serve.py) installs {rules.DKMS} {planned}"))
    if planned and not (installed and _pinned(installed, planned)):
        drivers.append((f"{host}, after deploys/serve.py ({rules.DKMS} {planned})", planned, None))
    for subject, driver, built in drivers:
        if kernel:
            out.append(rules.check_kernel(kernel, driver, built, subject=subject))
        else:
            out.append(_warn(subject, rules.KERNEL_DRIVER, "the running kernel is unknown", "check `uname -r`"))
        out.append(_driver_runtime(subject, driver, runtime, arch))
    loaded = g.get("driver_loaded")
    if installed and loaded and not _pinned(installed, loaded):
        out.append(_warn(host, rules.KERNEL_DRIVER, f"the loaded neuron module is {loaded}, {rules.DKMS} {installed} "
                                                    "is installed",
                         "stop processes using /dev/neuron*, then `rmmod neuron && modprobe neuron` (or reboot)"))
    frameworks = g.get("frameworks")
    if frameworks is None:
        out.append(_warn("image", rules.FRAMEWORK_RUNTIME, "the image's framework versions are unknown",
                         f"label the image ({hc.LABEL_IMAGE_FRAMEWORKS}: tritonfleet's build does) or pin "
                         "triton_neuron_frameworks"))
    else:
        out.append(rules.check_framework(frameworks, runtime, subject="image"))
    if models is not None:
        names = g.get("loads") or sorted(models)
        for name in names:
            out.append(_model_finding(name, models.get(name), runtime, arch))
    return out


def _pinned(installed: str, pattern: str) -> bool:
    """Whether the installed version is the one ``pattern`` (a pin, or a version) selects."""
    try:
        return rules.parse_version(installed).matches(pattern) or rules.parse_version(pattern).matches(installed)
    except (TypeError, ValueError):
        return installed == pattern


# -- model repositories ---------------------------------------------------------------------------------------

def scan_repository(where: str, endpoint: str | None = None, region: str | None = None) -> dict[str, list[Any]]:
    """{model: the artifacts :func:`tritonfleet.agent.artifacts.scan_model` read} of a local repository
    directory or an S3 one (:func:`s3_artifacts`: only the parts of the artifacts the reader looks at are
    downloaded). Raises :class:`CompatError`."""
    if where.startswith("s3://"):
        import shutil
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="tritonfleet-compat-"))
        try:
            names = s3_artifacts(where, root, endpoint=endpoint, region=region)
            return {name: artifacts.scan_model(root / name) for name in names}
        finally:
            shutil.rmtree(root, ignore_errors=True)
    path = Path(where)
    if not path.is_dir():
        raise CompatError(f"{where}: no such model repository directory")
    return {d.name: artifacts.scan_model(d) for d in sorted(path.iterdir())
            if d.is_dir() and not d.name.startswith(".")}


def s3_artifacts(uri: str, root: Path, endpoint: str | None = None, region: str | None = None) -> list[str]:
    """Lay out the S3 repository ``uri`` under ``root`` for the artifact reader, and return its model names:
    every artifact of a model's version directories (at most ``MAX_ARTIFACTS`` per model, and one more named) as a
    sparse file of its size holding only what the reader looks at (:func:`_ranges`), each range a Range GET
    (a few MiB per artifact), with the fleet's retrying client."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tritonfleet.fleet import aws

    bucket, _, prefix = uri[len("s3://"):].partition("/")
    prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
    if not bucket:
        raise CompatError(f"{uri}: expected s3://bucket/prefix")
    s3 = aws.client("s3", region, endpoint=endpoint)
    models: dict[str, int] = {}
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                parts = obj["Key"][len(prefix):].split("/")
                if not parts[0] or any(x in ("", ".", "..") for x in parts[:-1]) or parts[-1] in (".", ".."):
                    continue
                count = models.setdefault(parts[0], 0)
                if len(parts) < 3 or not parts[1].isdigit() or not parts[-1] or \
                        not parts[-1].lower().endswith(artifacts.ARTIFACT_SUFFIXES) or count > artifacts.MAX_ARTIFACTS:
                    continue
                models[parts[0]] = count + 1
                path = root.joinpath(*parts)
                path.parent.mkdir(parents=True, exist_ok=True)
                size = int(obj["Size"])
                with open(path, "wb") as fh:
                    fh.truncate(size)
                if count < artifacts.MAX_ARTIFACTS:  # the one more is only named (scan_model does not read it)
                    _fetch(s3, bucket, obj["Key"], path, size)
    except (BotoCoreError, ClientError) as exc:
        raise CompatError(f"{uri}: S3: {' '.join(str(exc).split())[:300]}") from None
    if not models:
        raise CompatError(f"{uri}: no objects under this prefix")
    for name in models:
        (root / name).mkdir(exist_ok=True)
    return sorted(models)


def _get(s3: Any, bucket: str, key: str, path: Path, start: int, end: int) -> None:
    """Bytes ``start``-``end`` (inclusive) of the object into the same place of ``path``."""
    if end < start:
        return
    body = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end}")["Body"].read()
    with open(path, "r+b") as fh:
        fh.seek(start)
        fh.write(body[:end - start + 1])


def _fetch(s3: Any, bucket: str, key: str, path: Path, size: int) -> None:
    """The parts of one artifact the reader looks at: a NEFF's start; a zip's end (its central directory), then
    its members' starts in the order the reader searches them (:func:`_ranges`)."""
    if size <= 0:
        return
    if path.name.lower().endswith(".neff"):
        _get(s3, bucket, key, path, 0, min(size, NEFF_HEAD) - 1)
        return
    if size <= NEFF_HEAD:  # small: the whole of it
        _get(s3, bucket, key, path, 0, size - 1)
        return
    _get(s3, bucket, key, path, 0, 3)
    with open(path, "rb") as fh:
        zipped = fh.read(4) == b"PK\x03\x04"
    if not zipped:  # a NEFF under another name, or not an archive: its start is what the reader reads
        _get(s3, bucket, key, path, 0, min(size, NEFF_HEAD) - 1)
        return
    _get(s3, bucket, key, path, max(0, size - ZIP_TAIL), size - 1)
    for start, end in _ranges(path, size):
        _get(s3, bucket, key, path, start, end)


def _ranges(path: Path, size: int) -> list[tuple[int, int]]:
    """Byte ranges of a zip's members the artifact reader may read, from its central directory (in the sparse
    ``path``): code members (to 256 KiB), then data.pkl, the tensors and the constants, each to
    ``MAX_MEMBER_SCAN``, up to :data:`ZIP_MEMBERS` bytes in all; each range starts at the member's local header."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return []

    def order(info: zipfile.ZipInfo) -> tuple[int, int]:
        name = info.filename
        if "/code/" in f"/{name}" and name.endswith(".py"):
            return (0, 0)
        if name == "data.pkl" or name.endswith("/data.pkl"):
            return (1, 0)
        m = _TENSOR.search(name)
        if m:
            return (2 if m.group(1) == "data" else 4, int(m.group(2)))
        if name.endswith("constants.pkl"):
            return (3, 0)
        return (5, 0)

    out: list[tuple[int, int]] = []
    total = 0
    for info in sorted(infos, key=order):
        if order(info)[0] == 5 and info.compress_size > 4096:
            continue  # other members the reader never opens (extra files, weights): only the small ones
        cap = artifacts.MAX_CODE_SCAN if order(info)[0] == 0 else artifacts.MAX_MEMBER_SCAN
        length = _LOCAL_HEADER_SLACK + len(info.filename.encode()) + min(info.compress_size, cap)
        if total + length > ZIP_MEMBERS:
            break
        total += length
        out.append((info.header_offset, min(size, info.header_offset + length) - 1))
    return out


# -- the command ----------------------------------------------------------------------------------------------

def _read_host(host: str, data: dict, cfg: Any) -> dict[str, Any]:
    from tritonfleet.access.ssh import HostUnreachable, connect

    if not cfg.instance.has_accelerator:
        return gathered(host, cfg, None)
    images = sorted(set(_image_candidates(cfg).values()))
    try:
        session = connect(host, data)
    except HostUnreachable as exc:
        return gathered(host, cfg, None, unreachable=str(exc))
    try:
        rc, out, err = session.run(probe_command(images, cfg.instance.is_neuron, cfg.instance.is_gpu), root=True,
                                   timeout=PROBE_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - a command that times out or a dropped session: the host's row says so
        return gathered(host, cfg, None, unreachable=f"ssh: {exc or type(exc).__name__}")
    finally:
        session.close()
    if "%%os" not in out:
        first = err.strip().splitlines()[0] if err.strip() else f"exit status {rc}"
        return gathered(host, cfg, None, unreachable=f"the probe did not run: {first}")
    return gathered(host, cfg, parse_probe(out))


def fleet_compat(inventory: str, models: str | None = None
                 ) -> tuple[list[tuple[str, rules.Finding]], dict[str, list[Any]] | None]:
    """Every finding of the inventory's hosts with an accelerator, as ``(host, finding)`` pairs, and the
    repository read (None without ``models``). Raises :class:`CompatError` or
    :class:`~tritonfleet.config.ConfigError` for bad input."""
    from roles import all_roles
    from tritonfleet.access.inventory import load_inventory
    from tritonfleet.config import load_host_config

    roles = all_roles()
    hosts = [(h, d, load_host_config(h, d, roles)) for h, d in load_inventory(inventory)]
    hosts = [(h, d, c) for h, d, c in hosts if c.instance.has_accelerator]
    if not hosts:
        raise CompatError(f"{inventory}: no host with an accelerator")
    repo = scan_repository(models) if models else None
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        views = list(pool.map(lambda hdc: _read_host(*hdc), hosts))
    return [(v["host"], f) for v in views for f in host_findings(v, repo)], repo


def summary(pairs: list[tuple[str, rules.Finding]], models: int | None) -> dict[str, int]:
    """Counts for the summary line: hosts, models, and findings per verdict."""
    counts = {v: sum(1 for _, f in pairs if f.verdict == v) for v in rules.VERDICTS}
    return {"hosts": len({h for h, _ in pairs}), "models": models or 0, **counts}


def print_matrix(pairs: list[tuple[str, rules.Finding]], counts: Mapping[str, int]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(title="tritonfleet compat: the compatibility chain per host and model")
    for col in ("host", "subject", "link", "verdict", "what was found: the fix"):
        table.add_column(col, overflow="fold")
    colour = {rules.OK: "green", rules.WARN: "yellow", rules.FAIL: "red"}
    for host, f in pairs:
        subject = f.subject.removeprefix(f"host {host}").lstrip(", ") or "host"
        text = f.line + (f": {f.fix}" if f.fix else "")
        table.add_row(host, subject, f.link, f"[{colour[f.verdict]}]{f.verdict}[/{colour[f.verdict]}]", text)
    console.print(table)
    click.echo(_summary_line(counts))


def _summary_line(counts: Mapping[str, int]) -> str:
    models = f", {counts['models']} model(s)" if counts.get("models") else ""
    return (f"{counts['hosts']} host(s){models}: {counts[rules.OK]} ok, {counts[rules.WARN]} warn, "
            f"{counts[rules.FAIL]} fail")


def as_json(pairs: Iterable[tuple[str, rules.Finding]], counts: Mapping[str, int]) -> str:
    rows = [{"host": h, **asdict(f)} for h, f in pairs]
    return json.dumps({"findings": rows, "summary": dict(counts)}, indent=2)


@click.command("compat")
@click.option("--inventory", "-i", envvar="TRITONFLEET_INVENTORY", required=True,
              help="pyinfra inventory file (or set TRITONFLEET_INVENTORY).")
@click.option("--models", "models", default=None, metavar="DIR|s3://…",
              help="Model repository (<model>/<version>/ artifacts), local or s3://bucket/prefix: each model the "
                   "hosts load is judged against their image's runtime.")
@click.option("--json", "as_json_", is_flag=True, help="Print the findings and the summary as JSON.")
def compat(inventory: str, models: str | None, as_json_: bool) -> None:
    """The compatibility chain per host and model: kernel, Neuron driver, the image's runtime and frameworks,
    each model's compiler and NEFF (NVIDIA driver and image on GPU hosts): a verdict and the fix per link.

    Exits 1 when a link fails; warnings (versions the table cannot judge) are shown and do not fail."""
    from tritonfleet.config import ConfigError

    try:
        pairs, repo = fleet_compat(inventory, models)
    except (CompatError, ConfigError) as exc:
        raise click.ClickException(str(exc)) from None
    except SystemExit as exc:  # an inventory that refuses to load (e.g. sandbox not up)
        raise click.ClickException(str(exc)) from None
    except (OSError, SyntaxError) as exc:
        raise click.ClickException(f"cannot read inventory {inventory}: {exc}") from None
    counts = summary(pairs, len(repo) if repo is not None else None)
    if as_json_:
        click.echo(as_json(pairs, counts))
    else:
        print_matrix(pairs, counts)
    for host, f in pairs:
        if f.link == SSH:
            click.echo(f"Error: {host}: {f.line}", err=True)
    if counts[rules.FAIL]:
        raise SystemExit(1)
