"""Auto Scaling groups: the bundle (reproducible, verified by sha256, no secrets), the user data that
deploys from it, the launch template and the group (moto), and their removal by ``down``."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.unit.test_fleet_support import (
    NEURON_PARAM,
    REGION,
    aws,  # noqa: F401 - fixture
    image_named,
    no_sleep,
    put_public_parameter,
    spec,
)
from tritonfleet.fleet import asg, bundle, lifecycle
from tritonfleet.fleet.tags import FleetError, as_dict

ROOT = Path(__file__).resolve().parents[2]
SHA = "ab" * 32
DATA = {"models_s3_uri": "s3://models/repos/prod", "triton_models": ["resnet50"]}
SECRETS = {"triton_repository_secret": "/tritonfleet/prod/repository-secret"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return bundle.build_bundle(ROOT, DATA, tmp_path_factory.mktemp("bundle"), SECRETS)


def _members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_bundle_holds_the_project_data_and_inventory(built):
    members = _members(built.path)
    for name in ("tritonfleet/catalog.py", "roles/triton.py", "deploys/serve.py", "templates/fleet/asg-user-data.sh.j2",
                 "inventories/group_data/all.py", "pyproject.toml", "fleet-data.json", "inventories/fleet_local.py"):
        assert name in members, name
    assert members["tritonfleet/templates"].issym()
    assert not [n for n in members if "__pycache__" in n or n.endswith(".pyc") or ".egg-info" in n]
    assert {m.mtime for m in members.values()} == {0}
    assert hashlib.sha256(built.path.read_bytes()).hexdigest() == built.sha256


def test_generated_inventory_reads_data_and_secret_from_the_environment(built, tmp_path, monkeypatch):
    with tarfile.open(built.path) as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if m.name in (
            "fleet-data.json", "inventories/fleet_local.py")])
    monkeypatch.setenv("TRITONFLEET_SECRET_TRITON_REPOSITORY_SECRET", "s3cret-value-123")
    namespace: dict = {"__file__": str(tmp_path / "inventories/fleet_local.py")}
    exec(compile((tmp_path / "inventories/fleet_local.py").read_text(), "fleet_local.py", "exec"), namespace)
    [(host, data)] = namespace["fleet_local"]
    assert host == "@local"
    assert data == {**DATA, "triton_repository_secret": "s3cret-value-123"}
    assert "s3cret" not in built.path.read_bytes().decode("latin-1")


def test_bundle_is_reproducible(built, tmp_path):
    again = bundle.build_bundle(ROOT, DATA, tmp_path, SECRETS)
    assert again.sha256 == built.sha256
    other = bundle.build_bundle(ROOT, {**DATA, "triton_models": []}, tmp_path, SECRETS)
    assert other.sha256 != built.sha256


@pytest.mark.parametrize("data, secrets, message", [
    ({"triton_repository_secret": "hunter2"}, {}, "secrets do not go into the bundle"),
    ({}, {"triton_repository_secret": "not-a-path"}, "expected data_key=/ssm/parameter/name"),
    ({"x": object()}, {}, "not JSON"),
])
def test_bundle_refuses_secrets_and_bad_data(tmp_path, data, secrets, message):
    with pytest.raises(FleetError, match=message) as exc:
        bundle.build_bundle(ROOT, data, tmp_path, secrets)
    assert "hunter2" not in str(exc.value)


@pytest.mark.parametrize("key", ["triton_repository_secret", "api_token", "neuron_key", "db_password",
                                 "aws_secret_access_key", "ssh_key_passphrase", "triton_repository_secert"])
def test_keys_that_hold_secrets_stay_out_of_the_bundle(key):
    assert bundle.is_bundle_secret(key)


def test_a_keys_fingerprint_and_url_travel_in_the_bundle(tmp_path):
    # the sandbox's ASG boot found it: a key's fingerprint "looked secret" and a sandbox host's data was refused
    data = {"neuron_key_fingerprint": "ABCD" * 10, "nvidia_key_url": "https://example.com/gpgkey",
            "efa_key_fingerprint": "EF01" * 10, "models_s3_uri": "s3://models/repos/prod"}
    assert not any(bundle.is_bundle_secret(k) for k in data)
    built = bundle.build_bundle(ROOT, data, tmp_path, {})
    with tarfile.open(built.path) as tar:
        assert json.load(tar.extractfile(bundle.DATA_FILE)) == data


def test_user_data_fetches_verifies_and_deploys(built):
    url = "s3://fleet-bundles/prod/" + built.key_name
    text = asg.render_user_data(url, built.sha256, REGION, secret_env=built.secret_env, secret_parameters=SECRETS)
    assert text.startswith("#!/bin/bash\n")
    assert f"BUNDLE_URL={url}\n" in text and f"BUNDLE_SHA256={built.sha256}\n" in text
    assert 'sha256sum -c --quiet -' in text
    assert '"$VENV/bin/pyinfra" -y inventories/fleet_local.py deploys/serve.py' in text
    assert ("TRITONFLEET_SECRET_TRITON_REPOSITORY_SECRET=\"$(aws ssm get-parameter --region \"$REGION\" "
            "--with-decryption --name /tritonfleet/prod/repository-secret") in text
    assert "set -x" not in text
    if shutil.which("bash"):
        subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_user_data_needs_an_s3_url_and_a_sha256():
    with pytest.raises(FleetError, match="expected an s3:// URL and a hex sha256"):
        asg.render_user_data("https://example.com/b.tgz", SHA, REGION)
    with pytest.raises(FleetError, match="expected an s3:// URL"):
        asg.render_user_data("s3://b/k", "abc", REGION)


# -- the user data run (bash), with the AWS CLI and Python stand-ins on PATH: the download is a local copy ----------

FAKE_AWS = """#!{python}
\"\"\"aws as the user data uses it: `s3 cp URL DEST` copies $FAKE_BUNDLE, `ssm get-parameter` prints a value, the
lifecycle calls of an ABANDON before the bundle is installed say the instance's group and succeed.\"\"\"
import os, shutil, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write("aws " + " ".join(args) + "\\n")
if args[:2] == ["s3", "cp"]:
    url, dest = args[-2:]
    if url != os.environ["FAKE_URL"]:
        sys.exit(f"fatal error: An error occurred (404) when calling the HeadObject operation: {{url}}")
    shutil.copyfile(os.environ["FAKE_BUNDLE"], dest)
elif args[:2] == ["ssm", "get-parameter"]:
    print("s3cret-from-ssm")
elif args[:2] == ["ec2", "describe-tags"]:
    print("tritonfleet-prod")
elif args[:2] not in (["ec2", "create-tags"], ["autoscaling", "complete-lifecycle-action"]):
    sys.exit("aws: unexpected " + " ".join(args))
"""

FAKE_PYTHON = """#!/bin/sh
# a Python >= 3.10 whose venvs have a python, a pip and a pyinfra that only say how they were run ($FAKE_STUBS)
echo "python $*" >>"$FAKE_LOG"
case "$1" in
  -c) exit 0 ;;
  -m) mkdir -p "$3/bin" && cp "$FAKE_STUBS"/* "$3/bin/" ;;
esac
"""

STUBS = {
    # the venv's python: `-c` is the real one; the lifecycle helper says how it was run, `heartbeat` runs its command
    "python": """#!/bin/sh
if [ "$1" = -c ]; then exec {python} "$@"; fi
echo "lifecycle $*" >>"$FAKE_LOG"
if [ "$3" = heartbeat ]; then
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
  shift
  exec "$@"
fi
""",
    "pip": """#!/bin/sh
echo "pip $* (in $(pwd), secret $TRITONFLEET_SECRET_TRITON_REPOSITORY_SECRET)" >>"$FAKE_LOG"
""",
    "pyinfra": """#!/bin/sh
echo "pyinfra $* (in $(pwd), secret $TRITONFLEET_SECRET_TRITON_REPOSITORY_SECRET)" >>"$FAKE_LOG"
case "$*" in *deploys/qa.py*) exit "${{FAKE_QA_RC:-0}}" ;; esac
exit "${{FAKE_DEPLOY_RC:-0}}"
""",
}

FAKE_CURL = """#!/bin/sh
# IMDSv2 as curl reads it
echo "curl $*" >>"$FAKE_LOG"
case "$*" in
  *-X\\ PUT*/latest/api/token*) printf imds-token ;;
  *"X-aws-ec2-metadata-token: imds-token"*/latest/meta-data/instance-id) printf i-0123456789abcdef0 ;;
  *) exit 22 ;;
esac
"""

FAKE_SYSTEMCTL = """#!/bin/sh
echo "systemctl $*" >>"$FAKE_LOG"
"""

MOVED = ("/var/log/", "/opt/tritonfleet/", "/etc/systemd/system/")
LAUNCH_DONE = "lifecycle -m tritonfleet.agent.lifecycle launch-done --region us-east-1 --result"
UNIT = "etc/systemd/system/tritonfleet-lifecycle.service"


def _bootstrap(tmp_path: Path, built, bundle_file: Path, **env_extra: str) -> tuple[subprocess.CompletedProcess, Path,
                                                                                    Path]:
    """Run the rendered user data with / moved to ``tmp_path/root``; ``(process, root, its work dir)``; the process's
    stdout is the bootstrap log followed by the calls of the stand-ins."""
    url = "s3://fleet-bundles/prod/" + built.key_name
    text = asg.render_user_data(url, built.sha256, REGION, secret_env=built.secret_env, secret_parameters=SECRETS)
    root = tmp_path / "root"
    script = text
    for path in MOVED:
        script = script.replace(path, f"{root}{path}")
        assert f"{root}{path}" in script
    for line in script.splitlines():  # nothing the run writes stays outside tmp_path
        for path in MOVED:
            assert line.count(path) == line.count(f"{root}{path}"), line
    for path in MOVED:
        (root / path.strip("/")).mkdir(parents=True, exist_ok=True)
    bin_dir, stubs = tmp_path / "bin", tmp_path / "stubs"
    bin_dir.mkdir()
    stubs.mkdir()
    for folder, name, body in [(bin_dir, "aws", FAKE_AWS.format(python=sys.executable)),
                               (bin_dir, "python3.12", FAKE_PYTHON), (bin_dir, "curl", FAKE_CURL),
                               (bin_dir, "systemctl", FAKE_SYSTEMCTL)] + [
            (stubs, name, body.format(python=sys.executable)) for name, body in STUBS.items()]:
        (folder / name).write_text(body)
        (folder / name).chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "FAKE_LOG": str(log), "FAKE_URL": url,
           "FAKE_BUNDLE": str(bundle_file), "FAKE_STUBS": str(stubs), **env_extra}
    (tmp_path / "user-data.sh").write_text(script)
    proc = subprocess.run(["bash", str(tmp_path / "user-data.sh")], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    proc.stdout = (root / "var/log/tritonfleet-bootstrap.log").read_text() + log.read_text()
    return proc, root, root / "opt/tritonfleet/bundle" / built.sha256[:16]


needs_tools = pytest.mark.skipif(not all(shutil.which(t) for t in ("bash", "sha256sum", "tar", "gzip", "tr", "cut")),
                                 reason="the user data runs with bash, sha256sum, tar")


@needs_tools
def test_user_data_installs_and_deploys_the_bundle_it_was_given(built, tmp_path):
    proc, root, work = _bootstrap(tmp_path, built, built.path)
    assert proc.returncode == 0, proc.stdout
    assert (work / "pyproject.toml").is_file() and (work / "inventories/fleet_local.py").is_file()
    assert f"pip install --quiet --disable-pip-version-check {work} " in proc.stdout
    assert (f"pyinfra -y inventories/fleet_local.py deploys/serve.py (in {work}, secret s3cret-from-ssm)"
            in proc.stdout)
    assert "s3cret" not in (root / "var/log/tritonfleet-bootstrap.log").read_text()
    assert stat.S_IMODE((root / "var/log/tritonfleet-bootstrap.log").stat().st_mode) == 0o600


@needs_tools
def test_a_bootstrap_that_serves_continues_the_launch_hook_after_installing_the_watcher(built, tmp_path):
    """Issue 25, part 2: the deploy runs inside bounded heartbeats; no qa_suites: the deploy's health gate is the
    gate; the termination watcher is installed and started, then the launch hook is completed with CONTINUE."""
    proc, root, work = _bootstrap(tmp_path, built, built.path)
    assert proc.returncode == 0, proc.stdout
    calls = proc.stdout.splitlines()
    every = asg.heartbeat_every()
    heartbeat = (f"lifecycle -m tritonfleet.agent.lifecycle heartbeat --region us-east-1 --every {every} --max "
                 f"{asg.DEPLOY_LIMIT // every} --limit {asg.DEPLOY_LIMIT} -- {root}/opt/tritonfleet/controller/bin/"
                 "pyinfra -y inventories/fleet_local.py deploys/serve.py")
    assert calls.index(heartbeat) < calls.index(
        f"pyinfra -y inventories/fleet_local.py deploys/serve.py (in {work}, secret s3cret-from-ssm)")
    assert "no qa_suites in the bundle's data: the deploy's health gate was the launch gate" in proc.stdout
    assert "deploys/qa.py" not in proc.stdout.split("no qa_suites")[1]
    unit = (root / UNIT).read_text()
    assert f"{root}/opt/tritonfleet/controller/bin/python -m tritonfleet.agent.lifecycle watch-termination" in unit
    done = f"{LAUNCH_DONE} CONTINUE --reason the deploy and its health gate passed (no qa_suites)"
    assert calls.index("systemctl daemon-reload") < calls.index(
        "systemctl enable --now tritonfleet-lifecycle.service") < calls.index(done)
    assert [c for c in calls if c.startswith(LAUNCH_DONE)] == [done]
    assert "complete-lifecycle-action" not in proc.stdout  # the bundle's helper, not the AWS CLI


@needs_tools
def test_a_failed_deploy_abandons_the_launch_with_its_reason(built, tmp_path):
    proc, root, _work = _bootstrap(tmp_path, built, built.path, FAKE_DEPLOY_RC="3")
    assert proc.returncode == 1
    reason = (f"the deploy deploys/serve.py failed (exit status 3), see {root}/var/log/tritonfleet-bootstrap.log")
    assert f"tritonfleet bootstrap: {reason}" in proc.stdout
    assert [c for c in proc.stdout.splitlines() if c.startswith(LAUNCH_DONE)] == [f"{LAUNCH_DONE} ABANDON --reason {reason}"]
    assert not (root / UNIT).exists() and "systemctl" not in proc.stdout


def _rebundle(built, out: Path, data: dict):
    """``built`` with other data (its fleet-data.json replaced), as a bundle made some other way would be."""
    raw = io.BytesIO()
    with tarfile.open(built.path) as src, tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for m in src.getmembers():
            if m.name == bundle.DATA_FILE:
                payload = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
                m.size = len(payload)
                dst.addfile(m, io.BytesIO(payload))
            else:
                dst.addfile(m, src.extractfile(m) if m.isfile() else None)
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    sha = hashlib.sha256(packed.getvalue()).hexdigest()
    made = bundle.Bundle(out / f"tritonfleet-bundle-{sha[:16]}.tar.gz", sha, built.secret_env)
    out.mkdir(parents=True, exist_ok=True)
    made.path.write_bytes(packed.getvalue())
    return made


@pytest.fixture(scope="module")
def qa_bundles(tmp_path_factory):
    """Bundles whose data names QA suites: suites of the controller's (packed), and a data file naming a directory
    the bundle does not hold."""
    out = tmp_path_factory.mktemp("qa")
    suites = out / "my-suites"
    (suites / "bert").mkdir(parents=True)
    (suites / "bert" / "suite.yaml").write_text("model: bert\n")
    held = bundle.build_bundle(ROOT, {**DATA, "qa_suites": str(suites)}, out / "held", SECRETS)
    return {"held": held, "missing": _rebundle(held, out / "missing", {**DATA, "qa_suites": "qa-suites-gone"})}


def test_the_controllers_qa_suites_travel_in_the_bundle_and_its_data_names_them(tmp_path):
    suites = tmp_path / "suites"
    (suites / "bert" / "__pycache__").mkdir(parents=True)
    (suites / "bert" / "suite.yaml").write_text("model: bert\n")
    (suites / "bert" / "__pycache__" / "x.pyc").write_bytes(b"")
    made = bundle.build_bundle(ROOT, {**DATA, "qa_suites": str(suites)}, tmp_path / "a", SECRETS)
    members = _members(made.path)
    assert [n for n in members if n.startswith(bundle.QA_DIR)] == [bundle.QA_DIR, f"{bundle.QA_DIR}/bert",
                                                                  f"{bundle.QA_DIR}/bert/suite.yaml"]
    with tarfile.open(made.path) as tar:
        data = json.loads(tar.extractfile(bundle.DATA_FILE).read())
        assert tar.extractfile(f"{bundle.QA_DIR}/bert/suite.yaml").read() == b"model: bert\n"
    assert data["qa_suites"] == bundle.QA_DIR
    again = bundle.build_bundle(ROOT, {**DATA, "qa_suites": str(suites)}, tmp_path / "b", SECRETS)
    assert again.sha256 == made.sha256  # reproducible with the suites too
    # suites the project holds anyway stay where they are
    inside = bundle.build_bundle(ROOT, {**DATA, "qa_suites": "templates/qa"}, tmp_path / "c", SECRETS)
    with tarfile.open(inside.path) as tar:
        assert json.loads(tar.extractfile(bundle.DATA_FILE).read())["qa_suites"] == "templates/qa"
    assert not [n for n in _members(inside.path) if n.startswith(bundle.QA_DIR)]


@pytest.mark.parametrize("suites, said", [
    ("no-such-suites", "bundle data qa_suites 'no-such-suites': no such directory on the controller"),
    (["a"], "bundle data qa_suites ['a']: expected the path of a directory of QA suites"),
    ("{link}", "is a symbolic link: the bundle holds regular files and directories only"),
])
def test_qa_suites_the_bundle_cannot_carry_are_refused_in_one_line(tmp_path, suites, said):
    linked = tmp_path / "linked"
    (linked / "x").mkdir(parents=True)
    (linked / "x" / "y.yaml").symlink_to("/etc/hostname")
    suites = str(linked) if suites == "{link}" else suites
    with pytest.raises(FleetError) as exc:
        bundle.build_bundle(ROOT, {**DATA, "qa_suites": suites}, tmp_path / "out", SECRETS)
    assert said in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "out").exists()


@needs_tools
@pytest.mark.parametrize("case", ["passes", "fails", "not in the bundle"])
def test_the_qa_gate_decides_the_launch_when_the_data_names_suites(qa_bundles, tmp_path, case):
    held = qa_bundles["missing" if case == "not in the bundle" else "held"]
    proc, root, work = _bootstrap(tmp_path, held, held.path, FAKE_QA_RC="1" if case == "fails" else "0")
    done = [c for c in proc.stdout.splitlines() if c.startswith(LAUNCH_DONE)]
    qa_ran = f"pyinfra -y inventories/fleet_local.py deploys/qa.py (in {work}, secret s3cret-from-ssm)" in proc.stdout
    if case == "passes":
        assert proc.returncode == 0, proc.stdout
        assert qa_ran and done == [f"{LAUNCH_DONE} CONTINUE --reason the deploy and the QA gate passed"]
        assert (root / UNIT).is_file()
    elif case == "fails":
        assert proc.returncode == 1 and qa_ran
        assert done == [f"{LAUNCH_DONE} ABANDON --reason the QA gate deploys/qa.py failed (exit status 1), see "
                        f"{root}/var/log/tritonfleet-bootstrap.log"]
        assert not (root / UNIT).exists()
    else:
        assert proc.returncode == 1 and not qa_ran
        assert done == [f"{LAUNCH_DONE} ABANDON --reason qa_suites qa-suites-gone is not a directory of the bundle: "
                        "the QA gate cannot run"]


@needs_tools
def test_the_bootstrap_log_is_root_only_even_when_an_earlier_boot_left_it_readable(built, tmp_path):
    """Issue "Security", item 4: the log holds the whole root deploy; a log left 0644 is made 0600 first."""
    log = tmp_path / "root/var/log/tritonfleet-bootstrap.log"
    log.parent.mkdir(parents=True)
    log.write_text("an earlier boot\n")
    log.chmod(0o644)
    proc, root, work = _bootstrap(tmp_path, built, built.path)
    assert proc.returncode == 0, proc.stdout
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and log.read_text().startswith("an earlier boot\n")


def _tampered(path: Path, out: Path) -> Path:
    body = bytearray(path.read_bytes())
    body[len(body) // 2] ^= 0x01
    out.write_bytes(bytes(body))
    return out


@needs_tools
@pytest.mark.parametrize("wrong", ["another bundle", "one byte changed", "empty download"])
def test_user_data_refuses_a_bundle_whose_sha256_differs(built, tmp_path, wrong):
    if wrong == "another bundle":  # a good tarball of the project, only not the one the template names
        bad = bundle.build_bundle(ROOT, {**DATA, "triton_models": ["other"]}, tmp_path / "other", SECRETS).path
    elif wrong == "one byte changed":
        bad = _tampered(built.path, tmp_path / "tampered.tar.gz")
    else:
        bad = tmp_path / "empty.tar.gz"
        bad.write_bytes(b"")
    proc, _, work = _bootstrap(tmp_path, built, bad)
    assert proc.returncode != 0
    assert "tritonfleet bootstrap: bundle sha256 mismatch, not running it" in proc.stdout
    assert list(work.iterdir()) == []  # not extracted
    assert "python " not in proc.stdout and "pip " not in proc.stdout and "pyinfra " not in proc.stdout
    # the bundle's code is not trusted: the AWS CLI abandons the launch, the reason on the tag and in the log
    assert "ABANDON: bundle sha256 mismatch, not running it" in proc.stdout
    calls = proc.stdout.splitlines()
    tag = ("aws ec2 create-tags --region us-east-1 --resources i-0123456789abcdef0 --tags "
           "Key=tritonfleet:abandon-reason,Value=bundle sha256 mismatch not running it")
    complete = ("aws autoscaling complete-lifecycle-action --region us-east-1 --lifecycle-hook-name tritonfleet-launch "
                "--auto-scaling-group-name tritonfleet-prod --instance-id i-0123456789abcdef0 "
                "--lifecycle-action-result ABANDON")
    assert calls.index(tag) < calls.index(complete)
    assert "lifecycle " not in proc.stdout and "CONTINUE" not in proc.stdout


def test_up_asg_publishes_the_bundle_and_creates_template_and_group(aws, tmp_path):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    aws.s3.create_bucket(Bucket="fleet-bundles")
    subnets = tuple(sorted(s["SubnetId"] for s in aws.ec2.describe_subnets(
        Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"])[:2])
    result = lifecycle.up_asg(aws, spec(count=2, subnets=subnets), root=ROOT, data=DATA,
                              bundle_s3="s3://fleet-bundles/prod", work_dir=tmp_path, secret_parameters=SECRETS)
    # the published object is the bundle
    key = result.bundle_url.removeprefix("s3://fleet-bundles/")
    body = aws.s3.get_object(Bucket="fleet-bundles", Key=key)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == result.sha256
    # launch template: the user data carries the URL and the sha256; instances get the fleet tags
    template_id, version = result.launch_template
    data = aws.ec2.describe_launch_template_versions(LaunchTemplateId=template_id, Versions=[str(version)])[
        "LaunchTemplateVersions"][0]["LaunchTemplateData"]
    user_data = base64.b64decode(data["UserData"]).decode()
    assert result.bundle_url in user_data and result.sha256 in user_data
    assert data["InstanceType"] == "inf2.xlarge" and data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 500
    instance_tags = {t["ResourceType"]: as_dict(t["Tags"]) for t in data["TagSpecifications"]}
    assert instance_tags["instance"]["tritonfleet:fleet"] == "prod"
    # the group pins that version
    group = aws.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[result.group])["AutoScalingGroups"][0]
    assert group["LaunchTemplate"]["Version"] == str(version)
    assert (group["MinSize"], group["DesiredCapacity"], group["MaxSize"]) == (2, 2, 2)
    assert sorted(group["VPCZoneIdentifier"].split(",")) == list(subnets)
    assert as_dict(group["Tags"])["tritonfleet:fleet"] == "prod"
    # the profile may read the bundle and the secret parameter
    policy = aws.iam.get_role_policy(RoleName=f"tritonfleet-prod-{REGION}", PolicyName="tritonfleet-host-access")
    document = policy["PolicyDocument"]
    document = json.loads(document) if isinstance(document, str) else document
    sids = {s["Sid"]: s for s in document["Statement"]}
    assert sids["BundleRead"]["Resource"] == f"arn:aws:s3:::fleet-bundles/{key}"
    assert sids["SecretsRead"]["Resource"] == [
        f"arn:aws:ssm:{REGION}:123456789012:parameter/tritonfleet/prod/repository-secret"]
    # a group's hosts publish the queue-time metric and may mark themselves unhealthy, in this fleet only
    assert sids["WatchdogReplace"]["Condition"] == {
        "StringEquals": {"autoscaling:ResourceTag/tritonfleet:fleet": "prod"}}
    assert sids["QueueTimeMetric"]["Action"] == "cloudwatch:PutMetricData"

    # same bundle again: same template version; new data: a new version the group points to
    same = lifecycle.up_asg(aws, spec(count=2, subnets=subnets), root=ROOT, data=DATA,
                            bundle_s3="s3://fleet-bundles/prod", work_dir=tmp_path, secret_parameters=SECRETS)
    assert same.launch_template == result.launch_template and not same.created
    changed = lifecycle.up_asg(aws, spec(count=2, subnets=subnets), root=ROOT, data={**DATA, "triton_models": []},
                               bundle_s3="s3://fleet-bundles/prod", work_dir=tmp_path, secret_parameters=SECRETS)
    assert changed.launch_template == (template_id, version + 1)


def _template_hop_limit(clients, result) -> int:
    template_id, version = result.launch_template
    data = clients.ec2.describe_launch_template_versions(LaunchTemplateId=template_id, Versions=[str(version)])[
        "LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    return data["MetadataOptions"]["HttpPutResponseHopLimit"]


def test_the_group_s_containers_reach_the_instance_profile_only_with_models_s3_direct(aws, tmp_path):  # noqa: F811
    """Issue "Security", item 3: hop limit 1 (the host alone reaches the instance profile, with the SSM secret
    parameters in ASG mode), 2 only when the bundle's hosts set models_s3_direct."""
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    aws.s3.create_bucket(Bucket="fleet-bundles")
    result = lifecycle.up_asg(aws, spec(), root=ROOT, data=DATA, bundle_s3="s3://fleet-bundles/prod",
                              work_dir=tmp_path, secret_parameters=SECRETS)
    assert _template_hop_limit(aws, result) == 1
    direct = {**DATA, "models_s3_uri": "s3://models/prod", "models_s3_direct": True}
    result = lifecycle.up_asg(aws, spec(), root=ROOT, data=direct, bundle_s3="s3://fleet-bundles/prod",
                              work_dir=tmp_path, secret_parameters=SECRETS)
    assert _template_hop_limit(aws, result) == 2

    removed = lifecycle.down(aws, "prod", sleep=no_sleep)
    assert removed["auto-scaling-groups"] == [result.group]
    assert removed["launch-templates"] == ["tritonfleet-prod"]
    assert not aws.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[result.group])["AutoScalingGroups"]


def test_group_needs_subnets_and_sane_sizes(aws):  # noqa: F811
    with pytest.raises(FleetError, match="needs subnets"):
        asg.ensure_group(aws, "prod", ("lt-1", 1), [], desired=1)
    with pytest.raises(FleetError, match="min 3 <= desired 2"):
        asg.ensure_group(aws, "prod", ("lt-1", 1), ["subnet-1"], desired=2, min_size=3)


def test_bundle_tar_is_gzip_with_no_owner(built):
    with tarfile.open(fileobj=io.BytesIO(built.path.read_bytes()), mode="r:gz") as tar:
        assert {(m.uid, m.gid, m.uname, m.gname) for m in tar.getmembers()} == {(0, 0, "", "")}


# -- target groups of the group (issue 25, part 2: the instance joins its target groups once its launch hook passes,
# leaves them before termination; both are the Auto Scaling service's, which moto does not run) ------------------

def _target_group(clients, name: str, kind: str = "instance") -> str:
    vpc = clients.ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    return clients.elbv2.create_target_group(Name=name, Protocol="HTTP", Port=8000, VpcId=vpc, TargetType=kind)[
        "TargetGroups"][0]["TargetGroupArn"]


def _group_tgs(clients, name: str) -> tuple[list[str], str]:
    group = clients.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    return sorted(group.get("TargetGroupARNs") or []), group["HealthCheckType"]


def test_up_asg_puts_the_group_in_its_target_groups_exactly_and_checks_them_before_publishing(aws, tmp_path):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    aws.s3.create_bucket(Bucket="fleet-bundles")
    http, grpc = _target_group(aws, "prod-http"), _target_group(aws, "prod-grpc")

    def up(**kwargs):
        return lifecycle.up_asg(aws, spec(), root=ROOT, data=DATA, bundle_s3="s3://fleet-bundles/prod",
                                work_dir=tmp_path, secret_parameters=SECRETS, **kwargs)

    result = up(target_groups=[http, http])
    assert _group_tgs(aws, result.group) == ([http], "ELB")  # the group replaces what the target group fails
    up()  # not given: they stay
    assert _group_tgs(aws, result.group) == ([http], "ELB")
    up(target_groups=[grpc, http])  # given: exactly these
    assert _group_tgs(aws, result.group) == (sorted([grpc, http]), "ELB")
    up(target_groups=[grpc])
    assert _group_tgs(aws, result.group) == ([grpc], "ELB")
    up(target_groups=[])
    assert _group_tgs(aws, result.group) == ([], "EC2")


@pytest.mark.parametrize("arn, message", [
    ("prod-http", "expected an ELBv2 target group ARN"),
    ("arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/x/0123456789abcdef",
     "expected an ELBv2 target group ARN"),
    ("arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/nope/0123456789abcdef", "no such target group"),
    ("ip", "target type is ip; an Auto Scaling group registers instances"),
])
def test_a_target_group_the_group_cannot_use_is_refused_in_one_line_before_anything_is_published(
        aws, tmp_path, arn, message):  # noqa: F811
    put_public_parameter(NEURON_PARAM, image_named(aws, "ubuntu"))
    aws.s3.create_bucket(Bucket="fleet-bundles")
    if arn == "ip":
        arn = _target_group(aws, "prod-ip", "ip")
    with pytest.raises(FleetError, match=message) as exc:
        lifecycle.up_asg(aws, spec(), root=ROOT, data=DATA, bundle_s3="s3://fleet-bundles/prod", work_dir=tmp_path,
                         secret_parameters=SECRETS, target_groups=[arn])
    assert "\n" not in str(exc.value)
    assert aws.s3.list_objects_v2(Bucket="fleet-bundles").get("KeyCount") == 0
    assert not asg.find_groups(aws, "prod")
