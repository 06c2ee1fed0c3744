"""tritonfleet.fleet.network against a stub EC2 client: the subnets' VPC, the SSH CIDR, the rules each
server count wants and the calls (with their parameters as EC2 receives them) that create, reconcile and
delete the fleet's security group, with their one-line errors and the release wait's limits. Written for the
mutants ``make mutate`` found surviving (docs/mutation-survivors.md); no moto, so each runs in milliseconds."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tritonfleet.fleet import aws, network
from tritonfleet.fleet.aws import Clients
from tritonfleet.fleet.network import Network
from tritonfleet.fleet.tags import FleetError

REGION = "us-east-1"
CIDR = "203.0.113.7/32"
FLEET_SG_FILTERS = [{"Name": "tag:tritonfleet:fleet", "Values": ["prod"]},
                    {"Name": "tag:tritonfleet:role", "Values": ["security-group"]}]


def client_error(code: str, message: str = "nope") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "Operation")


def fleet_tags(fleet: str = "prod", role: str = "security-group") -> list[dict]:
    return [{"Key": "Name", "Value": f"{fleet}-{role}"}, {"Key": "tritonfleet:fleet", "Value": fleet},
            {"Key": "tritonfleet:role", "Value": role}]


class Ec2:
    """EC2 as far as network.py uses it; every call recorded as (operation, kwargs)."""

    def __init__(self, subnets=(), vpcs=(), groups=(), fail=None, deletes=None):
        self.subnets, self.vpcs, self.groups = list(subnets), list(vpcs), list(groups)
        self.fail = fail or {}  # operation -> ClientError
        self.deletes = deletes or {}  # group id -> list of outcomes (a ClientError or None), one per attempt
        self.calls: list[tuple[str, dict]] = []

    def _call(self, op, kwargs):
        self.calls.append((op, kwargs))
        if op in self.fail:
            raise self.fail[op]

    def ops(self) -> list[str]:
        return [op for op, _ in self.calls]

    def kwargs(self, op) -> list[dict]:
        return [kw for o, kw in self.calls if o == op]

    def describe_subnets(self, **kw):
        self._call("describe_subnets", kw)
        return {"Subnets": self.subnets}

    def describe_vpcs(self, **kw):
        self._call("describe_vpcs", kw)
        return {"Vpcs": self.vpcs}

    def describe_security_groups(self, **kw):
        self._call("describe_security_groups", kw)
        return {"SecurityGroups": self.groups}

    def create_security_group(self, **kw):
        self._call("create_security_group", kw)
        return {"GroupId": "sg-new"}

    def revoke_security_group_ingress(self, **kw):
        self._call("revoke_security_group_ingress", kw)

    def authorize_security_group_ingress(self, **kw):
        self._call("authorize_security_group_ingress", kw)

    def delete_security_group(self, **kw):
        self._call("delete_security_group", kw)
        outcomes = self.deletes.get(kw["GroupId"], [])
        outcome = outcomes.pop(0) if len(outcomes) > 1 else (outcomes[0] if outcomes else None)
        if outcome is not None:
            raise outcome


class Session:
    def __init__(self, **services):
        self.services = services

    def client(self, name, region_name=None, config=None):
        return self.services[name]


def clients(stub: Ec2, region: str = REGION) -> Clients:
    return Clients(region, session=Session(ec2=stub))


def subnet(subnet_id, vpc, zone):
    return {"SubnetId": subnet_id, "VpcId": vpc, "AvailabilityZone": zone}


# ---- resolve_network ----

def test_subnets_give_their_vpc_and_zones_in_the_order_asked():
    stub = Ec2(subnets=[subnet("subnet-b", "vpc-1", "us-east-1b"), subnet("subnet-a", "vpc-1", "us-east-1a")])
    net = network.resolve_network(clients(stub), ("subnet-a", "subnet-b"))
    assert net == Network("vpc-1", ("subnet-a", "subnet-b"), ("us-east-1a", "us-east-1b"))
    assert stub.calls == [("describe_subnets", {"SubnetIds": ["subnet-a", "subnet-b"]})]


def test_one_subnet_is_enough():
    stub = Ec2(subnets=[subnet("subnet-a", "vpc-9", "us-east-1c")])
    assert network.resolve_network(clients(stub), ("subnet-a",)) == Network("vpc-9", ("subnet-a",), ("us-east-1c",))


def test_subnets_in_several_vpcs_are_refused_naming_them_sorted():
    stub = Ec2(subnets=[subnet("subnet-a", "vpc-b", "z1"), subnet("subnet-b", "vpc-a", "z2"),
                        subnet("subnet-c", "vpc-b", "z3")])
    with pytest.raises(FleetError) as caught:
        network.resolve_network(clients(stub), ("subnet-a", "subnet-b", "subnet-c"))
    assert str(caught.value) == "--subnet: subnets are in 2 VPCs (vpc-a, vpc-b); use one VPC"


def test_unknown_subnet_is_one_line():
    stub = Ec2(fail={"describe_subnets": client_error("InvalidSubnetID.NotFound",
                                                       "The subnet ID 'subnet-x'\n does not exist")})
    with pytest.raises(FleetError) as caught:
        network.resolve_network(clients(stub), ("subnet-x",))
    assert str(caught.value) == "--subnet: InvalidSubnetID.NotFound: The subnet ID 'subnet-x' does not exist"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_without_subnets_the_default_vpc():
    stub = Ec2(vpcs=[{"VpcId": "vpc-default", "IsDefault": True}])
    assert network.resolve_network(clients(stub)) == Network("vpc-default", (), ())
    assert stub.calls == [("describe_vpcs", {"Filters": [{"Name": "is-default", "Values": ["true"]}]})]


def test_without_subnets_and_default_vpc_says_pass_subnet():
    stub = Ec2(vpcs=[])
    with pytest.raises(FleetError) as caught:
        network.resolve_network(clients(stub, "eu-west-3"), ())
    assert str(caught.value) == "eu-west-3 has no default VPC: pass --subnet (one or more, in one VPC)"


# ---- check_cidr ----

@pytest.mark.parametrize("cidr, normal", [
    ("203.0.113.7/32", "203.0.113.7/32"), ("203.0.113.7", "203.0.113.7/32"), ("203.0.113.7/24", "203.0.113.0/24"),
    ("10.1.2.3/16", "10.1.0.0/16"), ("2001:db8::1/64", "2001:db8::/64"), ("2001:db8:1::/48", "2001:db8:1::/48")])
def test_cidr_is_normalised(cidr, normal):
    assert network.check_cidr(cidr) == normal


@pytest.mark.parametrize("cidr, count, widest", [("0.0.0.0/1", "2.15e+09", 16), ("10.0.0.0/15", "1.31e+05", 16),
                                                 ("::/1", "1.7e+38", 48), ("2001:db8::/47", "2.42e+24", 48)])
def test_a_cidr_wider_than_a_site_needs_allow_wide_ssh(cidr, count, widest):
    """Issue "Security", item 6: 0.0.0.0/1 is half the internet."""
    with pytest.raises(FleetError) as caught:
        network.check_cidr(cidr)
    assert str(caught.value) == (f"--ssh-cidr {cidr}: {count} addresses, wider than a /{widest}; give your own "
                                 "address/32 (or your network), or pass --allow-wide-ssh")
    assert network.check_cidr(cidr, allow_wide=True) == cidr


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "::/0", "10.1.2.3/0"])
@pytest.mark.parametrize("allow_wide", [False, True])
def test_cidr_of_the_whole_internet_is_refused(cidr, allow_wide):
    with pytest.raises(FleetError) as caught:
        network.check_cidr(cidr, allow_wide)
    assert str(caught.value) == (f"--ssh-cidr {cidr}: refusing to open SSH to the whole internet; "
                                 "give your own address/32")


@pytest.mark.parametrize("cidr", ["me", "203.0.113.7/33", "", "300.1.1.1/32"])
def test_cidr_that_is_none_is_one_line(cidr):
    with pytest.raises(FleetError) as caught:
        network.check_cidr(cidr)
    assert str(caught.value) == f"--ssh-cidr {cidr!r}: expected a CIDR such as 203.0.113.7/32"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


# ---- triton_port_ranges and desired_rules ----

@pytest.mark.parametrize("servers, ranges", [
    (-2, []), (0, []), (1, [(8000, 8002)]), (2, [(8000, 8002), (8010, 8012)]),
    (4, [(8000, 8002), (8010, 8012), (8020, 8022), (8030, 8032)])])
def test_triton_port_ranges_one_per_server(servers, ranges):
    assert network.triton_port_ranges(servers) == ranges


def test_desired_rules_ssh_from_the_cidr_and_tritons_from_the_group():
    assert network.desired_rules(CIDR, "sg-lb", 2) == {
        ("tcp", 22, 22, "cidr4", CIDR), ("tcp", 8000, 8002, "sg", "sg-lb"), ("tcp", 8010, 8012, "sg", "sg-lb")}


@pytest.mark.parametrize("source, servers", [(None, 3), ("", 3), ("sg-lb", 0)])
def test_desired_rules_without_a_source_group_or_servers_only_ssh(source, servers):
    assert network.desired_rules("2001:db8::/64", source, servers) == {("tcp", 22, 22, "cidr6", "2001:db8::/64")}


# ---- _current_rules ----

def test_current_rules_one_per_source_each_with_the_permission_naming_only_it():
    group = {"GroupId": "sg-1", "IpPermissions": [
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "PrefixListIds": [],
         "IpRanges": [{"CidrIp": "198.51.100.1/32"}, {"CidrIp": "198.51.100.2/32", "Description": "d"}],
         "Ipv6Ranges": [{"CidrIpv6": "2001:db8::/64"}],
         "UserIdGroupPairs": [{"GroupId": "sg-lb", "UserId": "123456789012"}]},
        {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]},
    ]}
    assert network._current_rules(group) == {
        ("tcp", 22, 22, "cidr4", "198.51.100.1/32"):
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "198.51.100.1/32"}]},
        ("tcp", 22, 22, "cidr4", "198.51.100.2/32"):
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
             "IpRanges": [{"CidrIp": "198.51.100.2/32", "Description": "d"}]},
        ("tcp", 22, 22, "cidr6", "2001:db8::/64"):
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "Ipv6Ranges": [{"CidrIpv6": "2001:db8::/64"}]},
        ("tcp", 22, 22, "sg", "sg-lb"):
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
             "UserIdGroupPairs": [{"GroupId": "sg-lb", "UserId": "123456789012"}]},
        ("-1", -1, -1, "cidr4", "0.0.0.0/0"): {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]},
    }


def test_current_rules_of_a_permission_without_protocol():
    assert network._current_rules({"IpPermissions": [{"IpRanges": [{"CidrIp": "10.0.0.0/8"}]}]}) == {
        ("-1", -1, -1, "cidr4", "10.0.0.0/8"): {"IpRanges": [{"CidrIp": "10.0.0.0/8"}]}}


def test_current_rules_of_a_group_without_permissions():
    assert network._current_rules({"GroupId": "sg-1"}) == {}


# ---- _permission ----

def test_permission_without_a_description_carries_none():
    assert network._permission(("tcp", 8000, 8002, "sg", "sg-lb")) == {
        "IpProtocol": "tcp", "FromPort": 8000, "ToPort": 8002, "UserIdGroupPairs": [{"GroupId": "sg-lb"}]}
    assert network._permission(("tcp", 22, 22, "cidr4", CIDR), "") == {
        "IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": CIDR}]}


# ---- find_group ----

def test_find_group_by_fleet_tags_and_vpc():
    stub = Ec2(groups=[{"GroupId": "sg-1"}, {"GroupId": "sg-2"}])
    assert network.find_group(clients(stub), "prod", "vpc-1") == {"GroupId": "sg-1"}
    assert stub.calls == [("describe_security_groups",
                           {"Filters": FLEET_SG_FILTERS + [{"Name": "vpc-id", "Values": ["vpc-1"]}]})]


def test_find_group_in_any_vpc_and_none_found():
    stub = Ec2(groups=[])
    assert network.find_group(clients(stub), "prod") is None
    assert stub.calls == [("describe_security_groups", {"Filters": FLEET_SG_FILTERS})]


# ---- ensure_security_group ----

SSH_PERM = {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
            "IpRanges": [{"CidrIp": CIDR, "Description": "SSH (tritonfleet)"}]}


def triton_perm(lo, hi, source="sg-lb"):
    return {"IpProtocol": "tcp", "FromPort": lo, "ToPort": hi,
            "UserIdGroupPairs": [{"GroupId": source, "Description": f"Triton {lo}-{hi} (tritonfleet)"}]}


def test_ensure_creates_the_group_and_opens_ssh_and_each_servers_ports():
    stub = Ec2(groups=[])
    group_id = network.ensure_security_group(clients(stub), "prod", Network("vpc-1"), CIDR, "sg-lb", 2)
    assert group_id == "sg-new"
    assert stub.calls == [
        ("describe_security_groups", {"Filters": FLEET_SG_FILTERS + [{"Name": "vpc-id", "Values": ["vpc-1"]}]}),
        ("create_security_group", {
            "GroupName": "tritonfleet-prod", "VpcId": "vpc-1",
            "Description": "tritonfleet fleet prod: SSH from one CIDR, Triton from one security group",
            "TagSpecifications": [{"ResourceType": "security-group", "Tags": fleet_tags()}]}),
        ("authorize_security_group_ingress", {"GroupId": "sg-new", "IpPermissions": [
            SSH_PERM, triton_perm(8000, 8002), triton_perm(8010, 8012)]}),
    ]


def test_ensure_opens_ssh_to_an_ipv6_cidr():
    stub = Ec2(groups=[])
    network.ensure_security_group(clients(stub), "canary", Network("vpc-2"), "2001:db8::/64", None, 3)
    assert stub.kwargs("create_security_group")[0]["GroupName"] == "tritonfleet-canary"
    assert stub.kwargs("authorize_security_group_ingress") == [{"GroupId": "sg-new", "IpPermissions": [
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
         "Ipv6Ranges": [{"CidrIpv6": "2001:db8::/64", "Description": "SSH (tritonfleet)"}]}]}]


def test_ensure_reconciles_an_existing_group_revoking_extras_and_adding_whats_missing():
    group = {"GroupId": "sg-1", "IpPermissions": [
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "PrefixListIds": [],
         "IpRanges": [{"CidrIp": CIDR, "Description": "SSH (tritonfleet)"}, {"CidrIp": "0.0.0.0/0"}],
         "Ipv6Ranges": [], "UserIdGroupPairs": []},
        {"IpProtocol": "tcp", "FromPort": 8000, "ToPort": 8002,
         "UserIdGroupPairs": [{"GroupId": "sg-old", "UserId": "1"}, {"GroupId": "sg-lb", "UserId": "1"}]},
    ]}
    stub = Ec2(groups=[group])
    assert network.ensure_security_group(clients(stub), "prod", Network("vpc-1"), CIDR, "sg-lb", 3) == "sg-1"
    assert stub.ops() == ["describe_security_groups", "revoke_security_group_ingress",
                          "authorize_security_group_ingress"]
    assert stub.kwargs("revoke_security_group_ingress") == [{"GroupId": "sg-1", "IpPermissions": [
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]},
        {"IpProtocol": "tcp", "FromPort": 8000, "ToPort": 8002,
         "UserIdGroupPairs": [{"GroupId": "sg-old", "UserId": "1"}]}]}]
    assert stub.kwargs("authorize_security_group_ingress") == [{"GroupId": "sg-1", "IpPermissions": [
        triton_perm(8010, 8012), triton_perm(8020, 8022)]}]


def test_ensure_revokes_only_when_nothing_is_missing():
    group = {"GroupId": "sg-1", "IpPermissions": [
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": CIDR}]},
        {"IpProtocol": "tcp", "FromPort": 8000, "ToPort": 8002, "UserIdGroupPairs": [{"GroupId": "sg-lb"}]}]}
    stub = Ec2(groups=[group])
    network.ensure_security_group(clients(stub), "prod", Network("vpc-1"), CIDR, None, 1)
    assert stub.ops() == ["describe_security_groups", "revoke_security_group_ingress"]
    assert stub.kwargs("revoke_security_group_ingress") == [{"GroupId": "sg-1", "IpPermissions": [
        {"IpProtocol": "tcp", "FromPort": 8000, "ToPort": 8002, "UserIdGroupPairs": [{"GroupId": "sg-lb"}]}]}]


def test_ensure_on_a_group_as_wanted_changes_nothing():
    group = {"GroupId": "sg-1", "IpPermissions": [
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": CIDR}]},
        {"IpProtocol": "tcp", "FromPort": 8000, "ToPort": 8002, "UserIdGroupPairs": [{"GroupId": "sg-lb"}]}]}
    stub = Ec2(groups=[group])
    assert network.ensure_security_group(clients(stub), "prod", Network("vpc-1"), CIDR, "sg-lb", 1) == "sg-1"
    assert stub.ops() == ["describe_security_groups"]


@pytest.mark.parametrize("source", ["lb-1", "SG-1", "vpc-1"])
def test_ensure_refuses_a_source_that_is_no_group_id_before_any_call(source):
    stub = Ec2()
    with pytest.raises(FleetError) as caught:
        network.ensure_security_group(clients(stub), "prod", Network("vpc-1"), CIDR, source, 1)
    assert str(caught.value) == f"--triton-source-sg {source!r}: expected a security group id sg-..."
    assert stub.calls == []


def test_ensure_on_a_group_of_that_name_not_tagged_for_the_fleet():
    stub = Ec2(groups=[], fail={"create_security_group": client_error("InvalidGroup.Duplicate", "exists")})
    with pytest.raises(FleetError) as caught:
        network.ensure_security_group(clients(stub), "prod", Network("vpc-7"), CIDR, None, 1)
    assert str(caught.value) == ("security group tritonfleet-prod exists in vpc-7 but is not tagged for fleet prod; "
                                 "remove or rename it")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_ensure_other_create_error_is_one_line():
    stub = Ec2(groups=[], fail={"create_security_group": client_error("UnauthorizedOperation", "not\n allowed")})
    with pytest.raises(FleetError) as caught:
        network.ensure_security_group(clients(stub), "prod", Network("vpc-7"), CIDR, None, 1)
    assert str(caught.value) == "cannot create security group tritonfleet-prod: UnauthorizedOperation: not allowed"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize("op, permissions", [
    ("authorize_security_group_ingress", []),
    ("revoke_security_group_ingress", [{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
                                        "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]),
])
def test_ensure_rule_change_error_is_one_line(op, permissions):
    stub = Ec2(groups=[{"GroupId": "sg-1", "IpPermissions": permissions}],
               fail={op: client_error("RulesPerSecurityGroupLimitExceeded", "too\tmany")})
    with pytest.raises(FleetError) as caught:
        network.ensure_security_group(clients(stub), "prod", Network("vpc-1"), CIDR, "sg-lb", 1)
    assert str(caught.value) == "security group sg-1: RulesPerSecurityGroupLimitExceeded: too many"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


# ---- delete_security_groups ----

class Clock:
    """A clock that moves only when the code under test sleeps; network.poll is the real poll on it (and
    never sleeps for real: a poll without the test's sleep fails at once)."""

    def __init__(self, monkeypatch):
        self.now, self.slept = 0.0, []
        real = aws.poll

        def poll(check, **kw):
            kw.setdefault("sleep", self.no_real_sleep)
            return real(check, clock=lambda: self.now, **kw)

        monkeypatch.setattr(network, "poll", poll)

    @staticmethod
    def no_real_sleep(seconds):
        raise AssertionError(f"slept {seconds} s for real, not with the sleep given")

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def group(group_id, tags=None):
    return {"GroupId": group_id, "Tags": fleet_tags() if tags is None else tags}


def test_delete_asks_for_the_fleets_groups_and_deletes_each():
    stub = Ec2(groups=[group("sg-1"), group("sg-2")])
    assert network.delete_security_groups(clients(stub), "prod", sleep=pytest.fail) == ["sg-1", "sg-2"]
    assert stub.calls == [("describe_security_groups", {"Filters": FLEET_SG_FILTERS}),
                          ("delete_security_group", {"GroupId": "sg-1"}),
                          ("delete_security_group", {"GroupId": "sg-2"})]


@pytest.mark.parametrize("tags", [[], fleet_tags("other"), fleet_tags("prod", "key-pair")])
def test_delete_leaves_a_group_not_tagged_as_the_fleets_and_goes_on(tags):
    stub = Ec2(groups=[{"GroupId": "sg-x", **({"Tags": tags} if tags else {})}, group("sg-2")])
    assert network.delete_security_groups(clients(stub), "prod", sleep=pytest.fail) == ["sg-2"]
    assert stub.kwargs("delete_security_group") == [{"GroupId": "sg-2"}]


def test_delete_of_nothing_deletes_nothing():
    stub = Ec2(groups=[])
    assert network.delete_security_groups(clients(stub), "prod") == []


def test_delete_of_a_group_already_gone_counts_it():
    stub = Ec2(groups=[group("sg-1")], deletes={"sg-1": [client_error("InvalidGroup.NotFound", "gone")]})
    assert network.delete_security_groups(clients(stub), "prod", sleep=pytest.fail) == ["sg-1"]
    assert stub.kwargs("delete_security_group") == [{"GroupId": "sg-1"}]


def test_delete_retries_while_instances_hold_the_group_sleeping_the_interval(monkeypatch):
    clock = Clock(monkeypatch)
    held = client_error("DependencyViolation", "resource sg-1 has a dependent object")
    stub = Ec2(groups=[group("sg-1"), group("sg-2")], deletes={"sg-1": [held, held, None]})
    assert network.delete_security_groups(clients(stub), "prod", sleep=clock.sleep) == ["sg-1", "sg-2"]
    assert stub.kwargs("delete_security_group") == [{"GroupId": "sg-1"}] * 3 + [{"GroupId": "sg-2"}]
    assert clock.slept == [10, 10]


def test_delete_retries_with_the_interval_given():
    held = client_error("DependencyViolation", "held")
    stub = Ec2(groups=[group("sg-1")], deletes={"sg-1": [held, None]})
    slept = []
    assert network.delete_security_groups(clients(stub), "prod", interval=0.25, sleep=slept.append) == ["sg-1"]
    assert slept == [0.25]


def test_delete_without_a_sleep_given_sleeps_for_real():
    held = client_error("DependencyViolation", "held")
    stub = Ec2(groups=[group("sg-1")], deletes={"sg-1": [held, None]})
    assert network.delete_security_groups(clients(stub), "prod", interval=0.001) == ["sg-1"]
    assert len(stub.kwargs("delete_security_group")) == 2


def test_delete_uses_the_sleep_given():
    class Slept(Exception):
        pass

    def sleep(seconds):
        raise Slept(seconds)

    held = client_error("DependencyViolation", "held")
    stub = Ec2(groups=[group("sg-1")], deletes={"sg-1": [held]})
    with pytest.raises(Slept):
        network.delete_security_groups(clients(stub), "prod", timeout=0.05, interval=0.01, sleep=sleep)


def test_delete_gives_up_after_300_s_by_default_naming_the_group(monkeypatch):
    clock = Clock(monkeypatch)
    stub = Ec2(groups=[group("sg-1")], deletes={"sg-1": [client_error("DependencyViolation", "held")]})
    with pytest.raises(FleetError) as caught:
        network.delete_security_groups(clients(stub), "prod", sleep=clock.sleep)
    assert str(caught.value) == "timed out after 300 s waiting for security group sg-1 to be released"
    assert clock.slept == [10] * 30


def test_delete_gives_up_after_the_timeout_given(monkeypatch):
    clock = Clock(monkeypatch)
    stub = Ec2(groups=[group("sg-1")], deletes={"sg-1": [client_error("DependencyViolation", "held")]})
    with pytest.raises(FleetError) as caught:
        network.delete_security_groups(clients(stub), "prod", timeout=45, interval=5, sleep=clock.sleep)
    assert str(caught.value) == "timed out after 45 s waiting for security group sg-1 to be released"
    assert clock.slept == [5] * 9


def test_delete_other_error_is_one_line_and_stops():
    stub = Ec2(groups=[group("sg-1"), group("sg-2")],
               deletes={"sg-1": [client_error("UnauthorizedOperation", "not\n allowed")]})
    with pytest.raises(FleetError) as caught:
        network.delete_security_groups(clients(stub), "prod", sleep=pytest.fail)
    assert str(caught.value) == "cannot delete security group sg-1: UnauthorizedOperation: not allowed"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert stub.kwargs("delete_security_group") == [{"GroupId": "sg-1"}]


def test_the_exporter_ports_are_the_monitoring_role_s_defaults():
    from roles.monitoring import Settings

    fields = Settings.model_fields
    assert (network.NODE_EXPORTER_PORT, network.NEURON_EXPORTER_PORT, network.DCGM_EXPORTER_PORT) == (
        fields["node_exporter_port"].default, fields["neuron_exporter_port"].default, fields["dcgm_port"].default)


@pytest.mark.parametrize("servers, neuron, gpu, ports", [
    (1, True, False, [8002, 9100, 9010]), (2, False, True, [8002, 8012, 9100, 9400]), (0, False, False, [9100])])
def test_metrics_ports_per_host(servers, neuron, gpu, ports):
    assert network.metrics_ports(servers, neuron, gpu) == ports


def test_desired_rules_open_the_metrics_ports_to_each_source():
    rules = network.desired_rules(CIDR, None, 1, ("sg-0123456789abcdef0", "pl-0123456789abcdef0", "10.1.2.0/24"),
                                  [8002, 9100])
    assert rules == {("tcp", 22, 22, "cidr4", CIDR)} | {
        ("tcp", p, p, kind, src) for p in (8002, 9100) for kind, src in (
            ("sg", "sg-0123456789abcdef0"), ("pl", "pl-0123456789abcdef0"), ("cidr4", "10.1.2.0/24"))}
    assert network._describe(("tcp", 9100, 9100, "sg", "sg-1")) == "metrics 9100 (tritonfleet)"
    assert network._permission(("tcp", 9100, 9100, "pl", "pl-1"), "d") == {
        "IpProtocol": "tcp", "FromPort": 9100, "ToPort": 9100, "PrefixListIds": [{"PrefixListId": "pl-1", "Description": "d"}]}
