"""`tritonfleet sandbox up | status | down`."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from tritonfleet.sandbox import fleet


def _types(values: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for v in values:
        out += [t.strip() for t in v.split(",") if t.strip()]
    return out


@click.group()
def sandbox() -> None:
    """Local fleet of real hosts with simulated accelerators (needs root)."""


@sandbox.command()
@click.option("--hosts", "n", type=int, default=0, help="Number of hosts (default: one per instance type).")
@click.option("--instance-type", "types", multiple=True,
              help="Instance type for all hosts, or one per host (comma separated or repeated).")
@click.option("--lb/--no-lb", default=True, show_default=True,
              help=f"Add the load balancer host {fleet.LB_NAME} ({fleet.LB_TYPE}, no accelerator; the lb group).")
def up(n: int, types: tuple[str, ...], lb: bool) -> None:
    """Bring the sandbox fleet up (idempotent; stopped hosts start again with their disks)."""
    try:
        specs = fleet.default_specs(n, _types(types), lb=lb)
        fleet.up(specs)
    except (fleet.SandboxError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    _print_status()


@sandbox.command()
def status() -> None:
    """Show the sandbox hosts and services."""
    _print_status()


@sandbox.command()
def down() -> None:
    """Tear the sandbox down, hosts' disks included, and check that nothing is left."""
    try:
        left = fleet.down()
    except fleet.SandboxError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if left:
        click.echo("error: leftovers after down:\n  " + "\n  ".join(left), err=True)
        sys.exit(1)
    click.echo("sandbox is down; no processes, listening sockets, mounts, namespaces, links or cgroups left")


def _print_status() -> None:
    rows = fleet.status()
    table = Table(title="tritonfleet sandbox")
    for col in ("host", "address", "instance type", "instance id", "state"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["name"], r["ip"], r["instance_type"], r["instance_id"], r["state"])
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    if rows:
        console.print(f"S3 endpoint {fleet.s3_endpoint()}  bucket s3://{fleet.S3_BUCKET}/{fleet.S3_PREFIX}  "
                      f"IMDS http://{fleet.BRIDGE_IP}:{fleet.IMDS_PORT}  repos http://{fleet.BRIDGE_IP}:{fleet.REPO_PORT}/")
        console.print(f"pyinfra: pyinfra inventories/sandbox.py <deploy>    ssh key {fleet.key_path()}")
