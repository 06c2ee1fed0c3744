"""`tritonfleet sandbox up | boot | status | down`."""

from __future__ import annotations

import sys
from pathlib import Path

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
@click.argument("host")
@click.option("--user-data", "user_data", type=click.Path(dir_okay=False, exists=True), required=True,
              help="The launch template's user data (a script): run once on the fresh host's first boot.")
@click.option("--instance-id", default=None,
              help="The instance id the host's metadata service gives from now on (e.g. one moto's Auto Scaling "
                   "group launched); default: the one it has.")
@click.option("--wait", "wait_s", type=click.IntRange(0, 7200), default=1800, show_default=True,
              help="Seconds to wait for the user data to end (0: return once the host boots).")
def boot(host: str, user_data: str, instance_id: str | None, wait_s: int) -> None:
    """Boot HOST on a fresh disk from USER_DATA, as cloud-init runs a launch template's (its disk is replaced).

    The user data runs with the sandbox's AWS (moto) and IMDS as the region's endpoints, pip's index the sandbox's
    PyPI and the AWS CLI installed, as on an AMI. Exit status 1 when the user data failed or is still running."""
    try:
        data = Path(user_data).read_bytes()
        h = fleet.boot_host(host, data, instance_id=instance_id)
        click.echo(f"{h.name} ({h.ip}, {h.instance_id}) booted; the user data runs "
                   "(/var/log/cloud-init-output.log on the host)")
        if wait_s:
            result = fleet.wait_user_data(host, wait_s, say=click.echo)
            click.echo(f"{h.name}: user data ended: {result}")
            if not result.startswith("success "):
                sys.exit(1)
    except (fleet.SandboxError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


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
