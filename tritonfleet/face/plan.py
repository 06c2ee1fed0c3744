"""``tritonfleet plan``: accelerator memory per Triton server, before anything is deployed.

    tritonfleet plan --inventory inventories/inf2.py [--models DIR] [--headroom 10]
    tritonfleet plan --inventory inventories/inf2.py --pack models.yaml [--models DIR] [--format python|yaml]

Without ``--pack``: a row per host and server of the inventory (its validated placement): devices, cores,
capacity (device memory less the headroom: ``--headroom``, else the host's ``triton_memory_headroom_pct``), the
models it loads with their footprints (:mod:`tritonfleet.footprint`) and the MiB left free. A server whose models
do not fit is an error line, and the exit code is 1 (the line preflight refuses the deploy with, which
``plan`` shows in its table instead). The models a server loads: its own ``models`` when the server entry has them, else the
host's ``triton_models``, else every model of the repository. The repository: ``--models DIR``, else the host's
``models_source`` or ``models_s3_uri`` (an S3 repository is read from its listing and its config.pbtxt files
only: :func:`s3_skeleton`).

With ``--pack models.yaml``: places the listed models' replicas on the inventory's devices (first fit
decreasing, :mod:`tritonfleet.packing`) and prints the proposed ``triton_servers`` per host (a Python literal to
paste into the host's data, or YAML), each device's utilisation and the replicas left unplaced (exit code 1
when there are any). ``models.yaml``::

    models:
      - name: bert_base
        footprint_mib: 12288      # MiB per replica (a replica is one server loading the model)
        replicas: 2
        neuron_arch: inf2         # compiled for inf2: runs on inf2 and trn1 (packing.RUNS_ON)
      - name: resnet50
        path: models/resnet50     # estimated from the model directory (relative to this file)
        gpu_only: true
      - name: yolo                # neither: estimated from --models DIR/yolo

Bad input (an unreadable file, an unknown key, a model that is not there) is one line and exit code 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import click
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from tritonfleet import catalog
from tritonfleet.footprint import (
    DEFAULT_HEADROOM_PCT,
    Capacity,
    Footprint,
    FootprintError,
    MemoryPlanError,
    check_fit,
    model_footprint,
    repository_footprints,
    server_capacity,
)
from tritonfleet.packing import Bin, Demand, Packing, host_bins, pack, proposed_servers
from tritonfleet.placement import format_core_range

_UNSET: Any = object()


class PlanError(ValueError):
    """Bad input to ``plan`` (one line)."""


@dataclass
class ServerPlan:
    """One server's memory plan: its capacity, its models' footprints, and the error when they do not fit."""

    host: str
    instance_type: str
    server: str
    devices: tuple[int, ...]
    cores: tuple[int, ...]
    gpus: tuple[int, ...]
    capacity: Capacity
    accelerator: str = "neuron"
    footprints: list[Footprint] = field(default_factory=list)
    error: str | None = None

    @property
    def need_mib(self) -> int:
        return sum(f.total_mib for f in self.footprints)

    @property
    def free_mib(self) -> int:
        return self.capacity.mib - self.need_mib


# -- the inventory's servers --------------------------------------------------------------------------------

def _local_repository(models: str | None, host: str, cfg: Any, mirrors: dict[str, Path] | None = None) -> Path:
    where = models or cfg.models.source
    if where is None:
        if cfg.models.s3_uri:
            where = cfg.models.s3_uri
        else:
            raise PlanError(f"{host}: no model repository: give --models DIR (or set models_source)")
    if str(where).startswith("s3://"):
        cache = mirrors if mirrors is not None else {}
        if where not in cache:
            cache[where] = s3_skeleton(where, endpoint=cfg.models.s3_endpoint, region=cfg.models.s3_region)
        return cache[where]
    path = Path(where)
    if not path.is_dir():
        raise PlanError(f"{where}: no such model repository directory")
    return path


def s3_skeleton(uri: str, endpoint: str | None = None, region: str | None = None) -> Path:
    """A local stand-in of the S3 repository ``uri`` for the footprint rules: every ``config.pbtxt`` downloaded,
    every other object a sparse file of its size (so the artifacts' sizes are what they are in S3, without
    downloading them). One listing and one GET per model; a client with the fleet's retries."""
    import atexit
    import shutil
    import tempfile

    from botocore.exceptions import BotoCoreError, ClientError

    from tritonfleet.fleet import aws

    bucket, _, prefix = uri[len("s3://"):].partition("/")
    prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
    if not bucket:
        raise PlanError(f"{uri}: expected s3://bucket/prefix")
    s3 = aws.client("s3", region, endpoint=endpoint)
    root = Path(tempfile.mkdtemp(prefix="tritonfleet-plan-"))
    atexit.register(shutil.rmtree, root, True)  # sparse files: no space taken, but no leftovers either
    found = 0
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(prefix):]
                parts = rel.split("/")
                if not rel or rel.endswith("/") or any(x in ("", ".", "..") for x in parts):
                    continue
                path = root.joinpath(*parts)
                path.parent.mkdir(parents=True, exist_ok=True)
                if parts[-1] == "config.pbtxt" and len(parts) == 2:
                    path.write_bytes(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
                else:
                    with open(path, "wb") as fh:
                        fh.truncate(int(obj["Size"]))
                found += 1
    except (BotoCoreError, ClientError) as exc:
        raise PlanError(f"{uri}: S3: {' '.join(str(exc).split())[:300]}") from None
    if not found:
        raise PlanError(f"{uri}: no objects under this prefix")
    return root


def server_models(cfg: Any, placement: Any) -> list[str] | None:
    """The models a server loads: its own ``models``, else the host's ``triton_models``; None for every model
    of the repository. A placement that resolves ``models`` itself is taken as it is (None: every model)."""
    resolved = getattr(placement, "models", _UNSET)
    if resolved is not _UNSET:
        return None if resolved is None else list(resolved)
    servers = list(cfg.triton.servers)
    spec = servers[placement.index] if placement.index < len(servers) else None
    own = getattr(spec, "models", None)
    if own is not None:
        return list(own)
    return list(cfg.triton.models) or None


def inventory_plan(inventory: str | Path, models: str | None = None,
                   headroom_pct: float | None = None) -> list[ServerPlan]:
    """A :class:`ServerPlan` per Triton server of the inventory, from each host's validated configuration
    (``headroom_pct``: None for each host's ``triton_memory_headroom_pct``). Raises :class:`PlanError` (or
    :class:`~tritonfleet.config.ConfigError`) for bad input."""
    from roles import all_roles
    from tritonfleet.access.inventory import load_inventory
    from tritonfleet.config import load_host_config

    plans: list[ServerPlan] = []
    mirrors: dict[str, Path] = {}  # one skeleton per S3 repository
    roles = all_roles()
    for host, data in load_inventory(inventory):
        if models is not None:  # --models stands in for the host's own repository
            data = {**data, "models_source": None}
            if models.startswith("s3://"):
                data = {**data, "models_s3_uri": models}
        # the plan checks the memory itself, and shows a server that does not fit in its table (preflight's
        # check would refuse the host's data with the same line)
        cfg = load_host_config(host, {**data, "triton_memory_check": False}, roles)
        headroom = cfg.triton.memory_headroom_pct if headroom_pct is None else headroom_pct
        if not cfg.instance.has_accelerator:
            continue
        repo = _local_repository(models, host, cfg, mirrors)
        accelerator: Literal["neuron", "gpu"] = "neuron" if cfg.instance.is_neuron else "gpu"
        for p in cfg.triton.placements:
            capacity = server_capacity(cfg.instance, p, headroom)
            try:
                prints = repository_footprints(repo, accelerator, gpus=len(p.gpus) or 1,
                                               models=server_models(cfg, p))
            except FootprintError as exc:
                raise PlanError(f"{host}: server {p.name}: {exc}") from None
            plan = ServerPlan(host, cfg.instance.name, p.name, p.devices, p.cores, p.gpus, capacity, accelerator,
                              sorted(prints.values(), key=lambda f: (-f.total_mib, f.model)))
            try:
                check_fit(host, p.name, plan.footprints, capacity)
            except MemoryPlanError as exc:
                plan.error = str(exc)
            plans.append(plan)
    return plans


def _ids(ids: Sequence[int]) -> str:
    return format_core_range(ids) if ids else "-"


def print_plan(plans: list[ServerPlan]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(title="tritonfleet plan: accelerator memory per server")
    for col in ("host", "server", "devices", "cores", "capacity MiB", "models (MiB)", "need MiB", "free MiB"):
        table.add_column(col, justify="right" if "MiB" in col and "models" not in col else "left")
    for p in plans:
        devices = f"gpu {_ids(p.gpus)}" if p.gpus else _ids(p.devices)
        cap = p.capacity
        capacity = f"{cap.mib} ({cap.raw_mib} - {cap.headroom_pct:g}%)"
        models = "\n".join(f"{f.describe()} ({f.source})" for f in p.footprints) or "-"
        free = f"[red]{p.free_mib}[/red]" if p.error else str(p.free_mib)
        table.add_row(f"{p.host}\n{p.instance_type}", p.server, devices, _ids(p.cores), capacity, models,
                      str(p.need_mib), free)
    console.print(table)
    seen: dict[tuple[str, str], Footprint] = {}
    for p in plans:
        for f in p.footprints:
            seen.setdefault((f.model, p.accelerator), f)
    if seen:
        why = Table(title="model footprints")
        for col in ("model", "on", "MiB each", "source"):
            why.add_column(col, justify="right" if "MiB" in col else "left")
        for (model, accelerator), f in sorted(seen.items()):
            why.add_row(model, accelerator, str(f.mib_each), f.why)
        console.print(why)


# -- packing --------------------------------------------------------------------------------------------------

class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")
    footprint_mib: StrictInt | None = Field(None, ge=0)
    path: str | None = Field(None, min_length=1)
    replicas: StrictInt = Field(1, ge=1)
    neuron_arch: Literal["inf1", "inf2", "trn1", "trn2"] | None = None
    gpu_only: StrictBool = False


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[_Entry] = Field(min_length=1)


def _where(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_demands(path: str | Path, models: str | None = None) -> list[Demand]:
    """The :class:`~tritonfleet.packing.Demand` of every model ``path`` (models.yaml) lists: its
    ``footprint_mib``, else the footprint estimated from its ``path`` (relative to the file) or from
    ``models/<name>``. Raises :class:`PlanError`."""
    import yaml

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PlanError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise PlanError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    if isinstance(raw, list):
        raw = {"models": raw}
    try:
        entries = _File.model_validate(raw).models
    except ValidationError as exc:
        err = exc.errors()[0]
        where = _where(err["loc"]) or "models"
        raise PlanError(f"{path}: {where}: {err['msg'].removeprefix('Value error, ')}") from None
    demands: list[Demand] = []
    for i, e in enumerate(entries):
        where = f"{path}: models[{i}]"
        if e.footprint_mib is not None and e.path is not None:
            raise PlanError(f"{where}: give footprint_mib or path, not both")
        if e.neuron_arch is not None and e.gpu_only:
            raise PlanError(f"{where}: neuron_arch and gpu_only exclude each other")
        if e.footprint_mib is not None:
            if e.name is None:
                raise PlanError(f"{where}: name: missing (a model with footprint_mib needs a name)")
            mib, name = e.footprint_mib, e.name
        else:
            model_dir = _model_dir(where, path, e, models)
            name = e.name or model_dir.name
            # unconstrained: the Neuron estimate, the larger, since the model may land on a Neuron device
            accelerator: Literal["neuron", "gpu"] = "gpu" if e.gpu_only else "neuron"
            try:
                mib = model_footprint(model_dir, accelerator).total_mib
            except FootprintError as exc:
                raise PlanError(f"{where}: {exc}") from None
        demands.append(Demand(name, mib, e.replicas, e.neuron_arch, e.gpu_only))
    names = [d.name for d in demands]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PlanError(f"{path}: model(s) {', '.join(dupes)} listed more than once")
    return demands


def _model_dir(where: str, path: Path, e: _Entry, models: str | None) -> Path:
    if e.path is not None:
        model_dir = Path(e.path) if Path(e.path).is_absolute() else path.parent / e.path
    elif e.name is not None and models is not None:
        model_dir = Path(models) / e.name
    else:
        raise PlanError(f"{where}: give footprint_mib, or path (or a name and --models DIR) to estimate it from")
    if not (model_dir / "config.pbtxt").is_file():
        raise PlanError(f"{where}: {model_dir}: no config.pbtxt (not a model directory)")
    return model_dir


def inventory_bins(inventory: str | Path, headroom_pct: float = DEFAULT_HEADROOM_PCT) -> tuple[list[Bin], dict[str, str]]:
    """Every accelerator device of the inventory as a :class:`~tritonfleet.packing.Bin` (hosts in inventory
    order), and ``{host: instance type}``. Hosts without an accelerator are left out."""
    from tritonfleet.access.inventory import load_inventory

    bins: list[Bin] = []
    types: dict[str, str] = {}
    for host, data in load_inventory(inventory):
        name = data.get("instance_type")
        if not name:
            raise PlanError(f"{host}: instance_type: missing (needed to know its devices)")
        try:
            itype = catalog.get(name)
        except (catalog.UnknownInstanceType, TypeError) as exc:
            raise PlanError(f"{host}: instance_type {name!r}: {exc}") from None
        if itype.has_accelerator:
            bins += host_bins(host, itype, headroom_pct)
            types[host] = itype.name
    if not bins:
        raise PlanError(f"{inventory}: no host with an accelerator to place models on")
    return bins, types


def host_data_text(servers: dict[str, list[dict[str, Any]]], types: dict[str, str], fmt: str = "python") -> str:
    """The proposed ``triton_servers`` per host: Python (the inventories' own form: one ``"triton_servers": [...]``
    entry per host to paste into its data) or YAML (``{host: {triton_servers: [...]}}``)."""
    if fmt == "yaml":
        import yaml

        text = yaml.safe_dump({h: {"triton_servers": s} for h, s in servers.items()}, sort_keys=False,
                              default_flow_style=None) if servers else ""
        return text + "".join(f"# {h} ({t}): nothing placed\n" for h, t in types.items() if h not in servers)
    lines: list[str] = []
    for host, entries in servers.items():
        lines.append(f"# {host} ({types.get(host, '?')})")
        lines.append('"triton_servers": [')
        lines += [f"    {json.dumps(e)}," for e in entries]  # str, int and lists only: valid Python
        lines.append("],")
    for host in types:
        if host not in servers:
            lines.append(f"# {host} ({types[host]}): nothing placed")
    return "\n".join(lines) + "\n"


def print_packing(packing: Packing, types: dict[str, str], fmt: str = "python") -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    click.echo("# Proposed host data (paste into each host's entry of the inventory)")
    click.echo(host_data_text(proposed_servers(packing), types, fmt), nl=False)
    table = Table(title="utilisation per device")
    for col in ("host", "device", "arch", "capacity MiB", "used MiB", "free MiB", "used %", "models"):
        table.add_column(col, justify="right" if "MiB" in col or "%" in col else "left")
    for use in packing.bins:
        b = use.bin
        models = ", ".join(f"{r.model} ({r.mib})" for r in sorted(use.replicas, key=lambda r: r.model)) or "-"
        table.add_row(b.host, ("gpu " if b.is_gpu else "") + ",".join(str(d) for d in b.devices), b.arch,
                      str(b.capacity_mib), str(use.used_mib), str(use.free_mib), f"{use.utilisation:.1%}", models)
    console.print(table)
    if packing.unplaced:
        left = Table(title="unplaced replicas")
        for col in ("model", "replica", "MiB", "reason"):
            left.add_column(col)
        for u in packing.unplaced:
            left.add_row(u.model, str(u.index + 1), str(u.mib), u.reason)
        console.print(left)


# -- the command ----------------------------------------------------------------------------------------------

@click.command()
@click.option("--inventory", "-i", envvar="TRITONFLEET_INVENTORY", required=True,
              help="pyinfra inventory file (or set TRITONFLEET_INVENTORY).")
@click.option("--models", "models", default=None, metavar="DIR|s3://…",
              help="Model repository (<model>/config.pbtxt, <model>/<version>/), local or s3://bucket/prefix; "
                   "default: each host's models_source or models_s3_uri. With --pack: a local directory where "
                   "entries with only a name are estimated from.")
@click.option("--pack", "pack_file", default=None, metavar="MODELS_YAML",
              help="Place the models this file lists on the inventory's devices and print the proposed "
                   "triton_servers per host.")
@click.option("--headroom", default=None, type=click.FloatRange(0, 100, max_open=True),
              help="Percent of each device's memory kept free (default: each host's triton_memory_headroom_pct, "
                   f"{DEFAULT_HEADROOM_PCT:g}; with --pack {DEFAULT_HEADROOM_PCT:g}).")
@click.option("--format", "fmt", type=click.Choice(["python", "yaml"]), default="python", show_default=True,
              help="--pack: how the proposed host data is printed.")
def plan(inventory: str, models: str | None, pack_file: str | None, headroom: float | None, fmt: str) -> None:
    """Accelerator memory per Triton server: capacity, models and their footprints, free MiB (exit code 1 when
    a server's models do not fit); with --pack, a proposed placement of models on devices."""
    from tritonfleet.config import ConfigError

    try:
        if pack_file is not None:
            demands = load_demands(pack_file, models)
            bins, types = inventory_bins(inventory, DEFAULT_HEADROOM_PCT if headroom is None else headroom)
            packing = pack(demands, bins)
            print_packing(packing, types, fmt)
            if packing.unplaced:
                raise click.ClickException(f"{len(packing.unplaced)} replica(s) unplaced (see the table above)")
            return
        plans = inventory_plan(inventory, models, headroom)
    except (PlanError, ConfigError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    except SystemExit as exc:  # an inventory that refuses to load (e.g. sandbox not up)
        raise click.ClickException(str(exc)) from None
    except (OSError, SyntaxError) as exc:
        raise click.ClickException(f"cannot read inventory {inventory}: {exc}") from None
    if not plans:
        raise click.ClickException(f"{inventory}: no Triton server to plan (no host with an accelerator)")
    print_plan(plans)
    errors = [p.error for p in plans if p.error]
    for line in errors:
        click.echo(f"Error: {line}", err=True)
    if errors:
        raise SystemExit(1)
