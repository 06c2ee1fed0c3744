"""``tritonfleet fleet up|down|list|autoscale``: EC2 fleets (instances or an Auto Scaling group) by tag.

The logic is in :mod:`tritonfleet.fleet`; this module turns options into a spec and errors into one
line (``click.ClickException``), never a traceback. AWS credentials come from boto3's usual chain
(environment, profile, SSO) and are never printed.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.table import Table

from tritonfleet.fleet import ami, autoscale, iam, instances, lifecycle
from tritonfleet.fleet.aws import Clients, one_line
from tritonfleet.fleet.tags import DEFAULT_ROLE, FleetError

REGION_ENV = ["TRITONFLEET_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"]


@contextlib.contextmanager
def _one_line() -> Iterator[None]:
    try:
        yield
    except FleetError as exc:
        raise click.ClickException(str(exc)) from None
    except (ClientError, BotoCoreError) as exc:
        raise click.ClickException(one_line(exc)) from None


def _region_option(f):
    return click.option("--region", envvar=REGION_ENV, required=True,
                        help="AWS region (or TRITONFLEET_REGION, AWS_REGION).")(f)


def _fleet_option(required: bool = True):
    return click.option("--fleet", "fleet_name", envvar="TRITONFLEET_FLEET", required=required,
                        help="Fleet name: 1-32 of a-z 0-9 - (or TRITONFLEET_FLEET).")


def print_instances(rows: list[dict], all_fleets: bool = False, console: Console | None = None) -> None:
    table = Table(title_justify="left")
    columns = [("id", "id"), ("type", "type"), ("AZ", "az"), ("state", "state"), ("public IP", "public_ip"),
               ("private IP", "private_ip"), ("role", "role")] + ([("fleet", "fleet")] if all_fleets else [])
    for title, _key in columns:
        table.add_column(title, no_wrap=True)
    for row in rows:
        table.add_row(*(str(row[key]) for _title, key in columns))
    (console or Console(width=None if sys.stdout.isatty() else 200)).print(table)


@click.group()
def fleet() -> None:
    """EC2 fleets: launch, list and remove the hosts Triton serves on (everything tagged tritonfleet:fleet)."""


@fleet.command()
@_fleet_option()
@_region_option
@click.option("--type", "-t", "instance_type", required=True, help="Instance type, e.g. inf2.xlarge.")
@click.option("--count", "-n", default=1, show_default=True, help="Instances of this type and role the fleet should have.")
@click.option("--role", default=DEFAULT_ROLE, show_default=True, help="Role tag of the instances (tritonfleet:role).")
@click.option("--os", "os_name", type=click.Choice(list(ami.OSES)), default=ami.DEFAULT_OS, show_default=True,
              help="OS of the Deep Learning base AMI.")
@click.option("--ami", help="AMI to use instead: ami-... or an SSM parameter path (required for inf1).")
@click.option("--ssh-user", help="SSH user of --ami (default: from the image name, else the OS's).")
@click.option("--ssh-cidr", envvar="TRITONFLEET_SSH_CIDR", required=True,
              help="CIDR SSH is open to, e.g. 203.0.113.7/32 (or TRITONFLEET_SSH_CIDR); not detected.")
@click.option("--allow-wide-ssh", is_flag=True, help="Accept an --ssh-cidr wider than a /16 (IPv6: a /48).")
@click.option("--triton-source-sg", help="Security group allowed to reach Triton's ports (none: ports closed).")
@click.option("--metrics-source", "metrics_sources", multiple=True, help="Security group (sg-...), prefix list "
              "(pl-...) or CIDR allowed to scrape the metrics ports (Triton's 8002 per server, node 9100, Neuron "
              "9010, DCGM 9400), repeatable; none: closed. Reconciled like the other rules.")
@click.option("--triton-servers", type=int, help="Triton servers per host to open ports for (default: one per device).")
@click.option("--subnet", "subnets", multiple=True, help="Subnet, repeatable: tried in order (another AZ on no capacity).")
@click.option("--public-ip/--no-public-ip", default=None, help="Public IPv4 address (default: the subnet's setting).")
@click.option("--volume-size", default=500, show_default=True, help="gp3 root volume, GiB.")
@click.option("--public-key", type=click.Path(dir_okay=False), help="Import this public key instead of creating one.")
@click.option("--key-dir", envvar="TRITONFLEET_KEY_DIR", help="Where a created private key goes (default ~/.ssh).")
@click.option("--models-s3-uri", help="s3://bucket/prefix the hosts may read (models_s3_uri).")
@click.option("--qa-s3-uri", help="s3://bucket/prefix whose qa/ the hosts may write (qa_reports_s3_uri).")
@click.option("--ecr-pull", is_flag=True, help="Let the hosts pull images from this account's ECR.")
@click.option("--models-s3-direct", is_flag=True, help="The hosts set models_s3_direct (Triton reads S3 from its "
              "container): instance metadata hop limit 2 instead of 1 (--asg: taken from --bundle-data).")
@click.option("--on-partial", type=click.Choice(instances.ON_PARTIAL), default="terminate", show_default=True,
              help="When only some instances start: terminate them, or keep them.")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait until SSH answers.")
@click.option("--ready-timeout", default=900, show_default=True, help="Seconds to wait for SSH.")
@click.option("--asg", is_flag=True, help="An Auto Scaling group deploying itself from a bundle, not instances.")
@click.option("--bundle-s3", help="--asg: s3://bucket/prefix the bundle is published to.")
@click.option("--bundle-data", type=click.Path(exists=True, dir_okay=False), help="--asg: JSON file of host data.")
@click.option("--secret", "secrets", multiple=True, help="--asg: data_key=/ssm/parameter read at boot, repeatable.")
@click.option("--min-size", type=int, help="--asg: minimum size (default --count).")
@click.option("--max-size", type=int, help="--asg: maximum size (default --count).")
@click.option("--target-group", "target_groups", multiple=True,
              help="--asg: ELBv2 target group (of instances) the group's instances serve in, repeatable; the group "
                   "registers an instance once its launch hook passes and deregisters it before termination. Given: "
                   "exactly these; not given: an existing group's stay.")
def up(fleet_name: str, region: str, instance_type: str, count: int, role: str, os_name: str, ami: str | None,
       ssh_user: str | None, ssh_cidr: str, allow_wide_ssh: bool, triton_source_sg: str | None,
       metrics_sources: tuple[str, ...], triton_servers: int | None,
       subnets: tuple[str, ...], public_ip: bool | None, volume_size: int, public_key: str | None,
       key_dir: str | None, models_s3_uri: str | None, qa_s3_uri: str | None, ecr_pull: bool,
       models_s3_direct: bool, on_partial: str,
       wait: bool, ready_timeout: int, asg: bool, bundle_s3: str | None, bundle_data: str | None,
       secrets: tuple[str, ...], min_size: int | None, max_size: int | None,
       target_groups: tuple[str, ...]) -> None:
    """Launch the fleet's instances (or its Auto Scaling group) with security group, key pair and profile."""
    spec = lifecycle.FleetSpec(
        fleet=fleet_name, instance_type=instance_type, ssh_cidr=ssh_cidr, count=count, role=role, os_name=os_name,
        ami=ami, ssh_user=ssh_user, triton_source_sg=triton_source_sg, triton_servers=triton_servers,
        subnets=subnets, public_ip=public_ip, volume_size=volume_size, public_key=public_key, key_dir=key_dir,
        access=iam.Access(models_s3_uri=models_s3_uri, qa_reports_s3_uri=qa_s3_uri, ecr_pull=ecr_pull),
        on_partial=on_partial, models_s3_direct=models_s3_direct, allow_wide_ssh=allow_wide_ssh,
        metrics_sources=metrics_sources)
    with _one_line():
        clients = Clients(region)
        if asg:
            _up_asg(clients, spec, bundle_s3, bundle_data, secrets, min_size, max_size, target_groups or None)
            return
        if target_groups:
            raise FleetError("--target-group is for --asg (instances launched without a group are registered by "
                             "tritonfleet rollout --lb elbv2 --target-group)")
        result = lifecycle.up(clients, spec, wait=wait, ready_timeout=ready_timeout, echo=click.echo)
        ids = result.existing + result.launched
        print_instances(instances.rows(instances.describe(clients, ids=ids)) if ids else [])
    click.echo(f"inventory: TRITONFLEET_REGION={region} TRITONFLEET_FLEET={fleet_name} "
               "pyinfra inventories/ec2.py deploys/serve.py")


def _project_root() -> Path:
    here = Path(__file__).resolve().parents[2]
    return here if (here / "deploys").is_dir() else Path.cwd()


def _up_asg(clients: Clients, spec: lifecycle.FleetSpec, bundle_s3: str | None, bundle_data: str | None,
            secrets: tuple[str, ...], min_size: int | None, max_size: int | None,
            target_groups: tuple[str, ...] | None) -> None:
    if not bundle_s3 or not bundle_data:
        raise FleetError("--asg needs --bundle-s3 s3://bucket/prefix and --bundle-data FILE.json")
    try:
        data = json.loads(Path(bundle_data).read_text())
    except (OSError, ValueError) as exc:
        raise FleetError(f"--bundle-data {bundle_data}: {exc}") from None
    if not isinstance(data, dict):
        raise FleetError(f"--bundle-data {bundle_data}: expected a JSON object of host data")
    parameters = {}
    for item in secrets:
        key, sep, parameter = item.partition("=")
        if not sep:
            raise FleetError(f"--secret {item!r}: expected data_key=/ssm/parameter/name")
        parameters[key] = parameter
    with tempfile.TemporaryDirectory(prefix="tritonfleet-bundle-") as work:
        result = lifecycle.up_asg(clients, spec, root=_project_root(), data=data, bundle_s3=bundle_s3, work_dir=work,
                                  secret_parameters=parameters, min_size=min_size, max_size=max_size,
                                  target_groups=target_groups, echo=click.echo)
    if not result.created:
        click.echo("running instances keep their launch template version until an instance refresh replaces them")


@fleet.command()
@_fleet_option()
@_region_option
@click.option("--key-dir", envvar="TRITONFLEET_KEY_DIR", help="Where up put a created private key (default ~/.ssh).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def down(fleet_name: str, region: str, key_dir: str | None, yes: bool) -> None:
    """Remove everything tagged for the fleet: groups, templates, instances, volumes, security group, key, IAM."""
    if not yes:
        click.confirm(f"Remove every resource of fleet {fleet_name} in {region}?", abort=True)
    with _one_line():
        removed = lifecycle.down(Clients(region), fleet_name, key_dir=key_dir, echo=click.echo)
    for kind, items in removed.items():
        if items:
            click.echo(f"removed {kind}: {', '.join(items)}")
    if not any(removed.values()):
        click.echo(f"fleet {fleet_name} has nothing in {region}")


@fleet.command(name="list")
@_fleet_option(required=False)
@_region_option
def list_(fleet_name: str | None, region: str) -> None:
    """Table of the fleet's instances (every fleet's without --fleet): id, type, AZ, state, addresses, role."""
    with _one_line():
        found = instances.describe(Clients(region), fleet=fleet_name)
    print_instances(instances.rows([i for i in found if i["State"]["Name"] != "terminated"]),
                    all_fleets=not fleet_name)


@fleet.command(name="autoscale")
@_fleet_option()
@_region_option
@click.option("--target-queue-ms", type=float, required=True,
              help="Average time a request may wait in Triton's queue, ms: more adds instances, less removes them.")
@click.option("--min", "min_size", type=int, required=True, help="Fewest instances the group scales in to.")
@click.option("--max", "max_size", type=int, required=True, help="Most instances the group scales out to.")
def autoscale_(fleet_name: str, region: str, target_queue_ms: float, min_size: int, max_size: int) -> None:
    """Target-tracking scaling of the fleet's Auto Scaling group on Triton's queue time per request."""
    with _one_line():
        result = autoscale.autoscale(Clients(region), fleet_name, target_queue_ms=target_queue_ms,
                                     min_size=min_size, max_size=max_size)
    for line in result.lines:
        click.echo(line)
