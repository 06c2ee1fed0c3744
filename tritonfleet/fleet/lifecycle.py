"""``fleet up`` and ``fleet down``: what a fleet is made of, created and removed as a whole.

``up`` resolves the AMI, then makes sure the fleet's security group, key pair and instance profile
exist (reusing and reconciling what is already there), launches the instances the fleet lacks (``count``
of ``instance_type`` in ``role``) and waits until SSH answers. ``up_asg`` does the same for an Auto
Scaling group from a published bundle. ``down`` removes every resource tagged for the fleet, in
dependency order, and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tritonfleet import catalog
from tritonfleet.fleet import ami, asg, bundle, iam, instances, keys, network
from tritonfleet.fleet.aws import Clients
from tritonfleet.fleet.tags import (
    DEFAULT_ROLE,
    TAG_ROLE,
    FleetError,
    as_dict,
    check_fleet_name,
    check_role,
    fleet_filters,
)

Echo = Callable[[str], None]


@dataclass(frozen=True)
class FleetSpec:
    """What ``up`` should make of a fleet (see ``tritonfleet fleet up --help`` for each field)."""

    fleet: str
    instance_type: str
    ssh_cidr: str
    count: int = 1
    role: str = DEFAULT_ROLE
    os_name: str = ami.DEFAULT_OS
    ami: str | None = None
    ssh_user: str | None = None
    triton_source_sg: str | None = None
    triton_servers: int | None = None
    subnets: tuple[str, ...] = ()
    public_ip: bool | None = None
    volume_size: int = 500
    public_key: str | None = None
    key_dir: str | None = None
    access: iam.Access = field(default_factory=iam.Access)
    on_partial: str = "terminate"
    # the hosts set models_s3_direct (Triton, in its container, reads S3 with the instance profile): the
    # metadata service's hop limit is 2 for them, 1 (the host only) otherwise
    models_s3_direct: bool = False
    allow_wide_ssh: bool = False  # an --ssh-cidr wider than network.WIDEST_SSH
    # what may scrape the hosts' metrics ports (Triton's, the exporters'): sg-..., pl-... or CIDRs
    metrics_sources: tuple[str, ...] = ()

    def checked(self) -> tuple[FleetSpec, catalog.InstanceType]:
        check_fleet_name(self.fleet)
        check_role(self.role)
        try:
            itype = catalog.get(self.instance_type)
        except catalog.UnknownInstanceType as exc:
            raise FleetError(str(exc)) from None
        if self.count < 1:
            raise FleetError(f"--count {self.count}: expected at least 1")
        if not 8 <= self.volume_size <= 16384:
            raise FleetError(f"--volume-size {self.volume_size}: expected 8-16384 GiB")
        servers = itype.device_count if self.triton_servers is None else self.triton_servers
        if not 0 <= servers <= itype.device_count:
            raise FleetError(f"--triton-servers {servers}: {itype.name} holds 0-{itype.device_count} servers")
        if self.on_partial not in instances.ON_PARTIAL:
            raise FleetError(f"--on-partial {self.on_partial!r}: expected keep or terminate")
        for uri, what in ((self.access.models_s3_uri, "--models-s3-uri"), (self.access.qa_reports_s3_uri, "--qa-s3-uri")):
            if uri:
                iam.split_s3(uri, what)
        for source in self.metrics_sources:
            network.source_kind(source, allow_wide=self.allow_wide_ssh)
        spec = replace(self, instance_type=itype.name, triton_servers=servers,
                       ssh_cidr=network.check_cidr(self.ssh_cidr, self.allow_wide_ssh))
        return spec, itype


@dataclass
class UpResult:
    """What ``up`` did: instances launched now, those already there, and their SSH addresses."""

    launched: list[str]
    existing: list[str]
    ready: dict[str, str]
    image: ami.Image
    security_group: str
    key: keys.KeyPair
    instance_profile: str


def _prepare(clients: Clients, spec: FleetSpec, itype: catalog.InstanceType, access: iam.Access,
             echo: Echo) -> tuple[instances.LaunchRequest, network.Network, keys.KeyPair]:
    image = ami.resolve(clients, itype, spec.os_name, spec.ami, spec.ssh_user)
    echo(f"AMI {image.image_id} ({image.source}; ssh user {image.ssh_user})")
    net = network.resolve_network(clients, spec.subnets)
    metric_ports = network.metrics_ports(spec.triton_servers or 0, itype.is_neuron, itype.is_gpu)
    group = network.ensure_security_group(clients, spec.fleet, net, spec.ssh_cidr, spec.triton_source_sg,
                                          spec.triton_servers or 0, spec.metrics_sources, metric_ports)
    echo(f"security group {group}: SSH from {spec.ssh_cidr}"
         + (f", Triton ports from {spec.triton_source_sg}" if spec.triton_source_sg else ", no Triton ports open")
         + (f", metrics ports {', '.join(map(str, metric_ports))} from {', '.join(spec.metrics_sources)}"
            if spec.metrics_sources else ", no metrics ports open"))
    key = keys.ensure_key_pair(clients, spec.fleet, spec.public_key, spec.key_dir)
    echo(f"key pair {key.name} ({key.origin}" + (f", private key {key.private_key})" if key.private_key else ")"))
    if key.origin == "created" and key.private_key is None:
        echo(f"warning: the private key of {key.name} is not at {keys.private_key_path(spec.fleet, spec.key_dir)}; "
             "point TRITONFLEET_SSH_KEY at it for the inventory")
    profile = iam.ensure_instance_profile(clients, spec.fleet, access)
    echo(f"instance profile {profile}")
    req = instances.LaunchRequest(
        fleet=spec.fleet, role=spec.role, instance_type=itype.name, image=image, os_name=spec.os_name,
        security_group=group, key_name=key.name, instance_profile=profile, volume_size=spec.volume_size,
        subnets=net.subnets, zones=net.zones, public_ip=spec.public_ip, hop_limit=2 if spec.models_s3_direct else 1)
    echo("instance metadata: IMDSv2, " + ("hop limit 2 (models_s3_direct: Triton's container reads S3 with the "
                                          "instance profile)" if spec.models_s3_direct else
                                          "hop limit 1 (containers cannot reach the instance profile)"))
    return req, net, key


def up(clients: Clients, spec: FleetSpec, *, wait: bool = True, probe: instances.Probe | None = None,
       ready_timeout: float = 900, sleep: Callable[[float], None] = time.sleep,
       clock: Callable[[], float] = time.monotonic, echo: Echo = lambda _line: None) -> UpResult:
    """Bring the fleet to ``spec.count`` live instances of ``spec.instance_type`` in ``spec.role``."""
    spec, itype = spec.checked()
    req, _net, key = _prepare(clients, spec, itype, spec.access, echo)
    live = [i for i in instances.describe(clients, fleet=spec.fleet, states=instances.LIVE_STATES)
            if as_dict(i.get("Tags")).get(TAG_ROLE) == spec.role and i["InstanceType"] == itype.name]
    existing = [i["InstanceId"] for i in live]
    missing = spec.count - len(existing)
    launched: list[str] = []
    if missing > 0:
        echo(f"launching {missing} x {itype.name}" + (f" ({len(existing)} already in the fleet)" if existing else ""))
        started = instances.launch(clients, req, missing, on_partial=spec.on_partial, sleep=sleep)
        launched = [i["InstanceId"] for i in started]
    else:
        echo(f"fleet {spec.fleet} already has {len(existing)} x {itype.name} in role {spec.role}")
    ready: dict[str, str] = {}
    if wait:
        ready = instances.wait_ready(clients, existing + launched, probe=probe, timeout=ready_timeout,
                                     sleep=sleep, clock=clock)
    return UpResult(launched, existing, ready, req.image, req.security_group, key, req.instance_profile)


@dataclass
class AsgResult:
    group: str
    created: bool
    launch_template: tuple[str, int]
    bundle_url: str
    sha256: str


def up_asg(clients: Clients, spec: FleetSpec, *, root: str | Path, data: Mapping[str, Any], bundle_s3: str,
           work_dir: str | Path, secret_parameters: Mapping[str, str] | None = None,
           min_size: int | None = None, max_size: int | None = None, target_groups: Sequence[str] | None = None,
           echo: Echo = lambda _line: None) -> AsgResult:
    """Publish a bundle and create (or update) the fleet's launch template and Auto Scaling group (``target_groups``:
    :func:`tritonfleet.fleet.asg.ensure_group`'s, checked before anything is published)."""
    if target_groups is not None:
        target_groups = asg.check_target_groups(clients, target_groups)
    spec, itype = spec.checked()
    if data.get("models_s3_direct") is True:  # the bundle's hosts read S3 from Triton's container
        spec = replace(spec, models_s3_direct=True)
    secret_parameters = dict(secret_parameters or {})
    built = bundle.build_bundle(root, data, work_dir, secret_parameters)
    url = bundle.publish_bundle(clients.s3, built, bundle_s3)
    echo(f"bundle {url} sha256 {built.sha256}")
    access = replace(spec.access, bundle_s3_url=url, secret_parameters=tuple(secret_parameters.values()),
                     asg_fleet=spec.fleet)
    req, net, _key = _prepare(clients, spec, itype, access, echo)
    subnets = net.subnets or _default_subnets(clients, net.vpc_id)
    user_data = asg.render_user_data(url, built.sha256, clients.region, secret_env=built.secret_env,
                                     secret_parameters=secret_parameters)
    template = asg.ensure_launch_template(clients, spec.fleet, asg.template_data(req, user_data))
    group, created = asg.ensure_group(clients, spec.fleet, template, subnets, desired=spec.count,
                                      min_size=min_size, max_size=max_size, target_groups=target_groups)
    echo(f"Auto Scaling group {group} ({'created' if created else 'updated'}) on launch template "
         f"{template[0]} version {template[1]}")
    return AsgResult(group, created, template, url, built.sha256)


def _default_subnets(clients: Clients, vpc_id: str) -> tuple[str, ...]:
    found = clients.ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]},
                                                  {"Name": "default-for-az", "Values": ["true"]}])["Subnets"]
    return tuple(sorted(s["SubnetId"] for s in found))


def down(clients: Clients, fleet: str, *, key_dir: str | None = None, timeout: float = 900,
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
         echo: Echo = lambda _line: None) -> dict[str, list[str]]:
    """Remove everything tagged for ``fleet``; ``{kind: [what was removed]}``."""
    check_fleet_name(fleet)
    removed: dict[str, list[str]] = {}
    removed["auto-scaling-groups"] = asg.delete_groups(clients, fleet, timeout=timeout, sleep=sleep, clock=clock)
    removed["launch-templates"] = asg.delete_launch_templates(clients, fleet)
    ids = [i["InstanceId"] for i in instances.describe(clients, fleet=fleet)
           if i["State"]["Name"] not in ("terminated",)]
    if ids:
        echo(f"terminating {', '.join(ids)}")
    instances.terminate(clients, ids, timeout=timeout, sleep=sleep, clock=clock)
    removed["instances"] = ids
    volumes = clients.ec2.describe_volumes(Filters=fleet_filters(fleet) + [
        {"Name": "status", "Values": ["available"]}])["Volumes"]
    for volume in volumes:
        clients.ec2.delete_volume(VolumeId=volume["VolumeId"])
    removed["volumes"] = [v["VolumeId"] for v in volumes]
    removed["security-groups"] = network.delete_security_groups(clients, fleet, timeout=timeout, sleep=sleep)
    removed["key-pairs"] = keys.delete_key_pairs(clients, fleet, key_dir)
    keys.known_hosts_path(fleet, key_dir).unlink(missing_ok=True)
    removed["iam"] = iam.delete_instance_profile(clients, fleet)
    return removed
