"""A sandbox host booted from user data, the way cloud-init runs a launch template's user data on EC2.

``tritonfleet sandbox boot HOST --user-data FILE`` (:func:`tritonfleet.sandbox.fleet.boot_host`) gives the host
a fresh disk, as the group's new instance would get, and before it boots writes into that disk what cloud-init
and the AMI provide on EC2:

- the user data, as ``/var/lib/cloud/instance/user-data.txt`` (0600) and, being a script,
  ``/var/lib/cloud/instance/scripts/part-001`` (0700);
- the unit that runs it once, on the first boot (``files/tritonfleet-sandbox-cloud-final.service``), with its output
  in ``/var/log/cloud-init-output.log`` and ``boot-finished`` written after it (the script's result and time);
- the sandbox region's endpoints for that run (``/etc/tritonfleet-sandbox/cloud.env``): ``AWS_ENDPOINT_URL``
  (the sandbox's moto: S3, SSM, EC2, Auto Scaling) and ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` (its IMDS, which
  hands out the instance profile's credentials), as the AWS CLI and boto3 read them;
- pip's index (``/etc/pip.conf``): the sandbox's PyPI, which serves a bundle's wheels
  (:func:`tritonfleet.sandbox.pypi.fetch_host_wheels`), as an AMI in a VPC without internet points pip at its
  mirror;
- the AWS CLI (``/opt/aws-cli``, ``/usr/local/bin/aws``), installed from those wheels, as a Deep Learning AMI
  ships it.

None of it is in the base image, so the other hosts are unchanged. Only shell-script user data (``#!``) is run:
cloud-config and MIME multi-part documents are refused in one line, as is anything over EC2's 16 KiB.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tritonfleet.fleet.asg import USER_DATA_LIMIT  # EC2's, before base64: the one the fleet code renders to
from tritonfleet.sandbox.layout import (
    BRIDGE_IP,
    FILES,
    IMDS_PORT,
    SandboxError,
    pypi_index_url,
    run,
    s3_endpoint,
)

INSTANCE_DIR = "var/lib/cloud/instance"
SCRIPT = f"{INSTANCE_DIR}/scripts/part-001"
BOOT_FINISHED = f"/{INSTANCE_DIR}/boot-finished"
OUTPUT_LOG = "/var/log/cloud-init-output.log"
UNIT = "tritonfleet-sandbox-cloud-final.service"
AWS_CLI_DIR = "/opt/aws-cli"


def check_user_data(data: bytes, where: str = "user data") -> None:
    """A shell script EC2 would take: ``#!`` first, at most 16 KiB; else a one-line error."""
    if not data.startswith(b"#!"):
        raise SandboxError(f"{where}: the sandbox runs script user data only (it starts with #!); cloud-config and "
                           "MIME multi-part user data are not supported")
    if len(data) > USER_DATA_LIMIT:
        raise SandboxError(f"{where}: {len(data)} bytes; EC2 takes at most {USER_DATA_LIMIT}")


def cloud_env() -> str:
    """The environment the user data runs with: the sandbox region's AWS and instance metadata endpoints."""
    return (f"AWS_ENDPOINT_URL={s3_endpoint()}\n"
            f"AWS_EC2_METADATA_SERVICE_ENDPOINT=http://{BRIDGE_IP}:{IMDS_PORT}\n")


def pip_conf() -> str:
    return f"[global]\nindex-url = {pypi_index_url()}\ntrusted-host = {BRIDGE_IP}\n"


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def prepare(root: Path, user_data: bytes, wheels: Sequence[Path]) -> None:
    """Write the user data, its unit, the region's endpoints and pip's index into the host's disk at ``root``
    (mounted, not booted), and install the AWS CLI from ``wheels``."""
    root = Path(root)
    check_user_data(user_data)
    _write(root / INSTANCE_DIR / "user-data.txt", user_data, 0o600)
    _write(root / SCRIPT, user_data, 0o700)
    _write(root / "etc/tritonfleet-sandbox/cloud.env", cloud_env().encode(), 0o644)
    _write(root / "etc/pip.conf", pip_conf().encode(), 0o644)
    _write(root / "etc/systemd/system" / UNIT, (FILES / UNIT).read_bytes(), 0o644)
    wants = root / "etc/systemd/system/multi-user.target.wants" / UNIT
    wants.parent.mkdir(parents=True, exist_ok=True)
    if not wants.is_symlink():
        wants.symlink_to(f"/etc/systemd/system/{UNIT}")
    install_aws_cli(root, wheels)


def install_aws_cli(root: Path, wheels: Sequence[Path]) -> None:
    """The AWS CLI in a venv of the host's own Python (``chroot``, no network: pip from its wheel, only ``wheels``)."""
    from tritonfleet.sandbox.pypi import AWS_CLI

    pips = [w for w in wheels if w.name.startswith("pip-")]
    if not any(w.name.startswith("awscli-") for w in wheels) or not pips:
        raise SandboxError("the host wheels have no awscli or pip wheel: cannot give the host its AWS CLI")
    stage = Path(root) / "var/tmp/tritonfleet-aws-cli-wheels"
    stage.mkdir(parents=True, exist_ok=True)
    try:
        for wheel in wheels:
            shutil.copyfile(wheel, stage / wheel.name)
        inside = "/var/tmp/tritonfleet-aws-cli-wheels"
        run(["chroot", str(root), "python3", "-m", "venv", "--without-pip", AWS_CLI_DIR])
        run(["chroot", str(root), f"{AWS_CLI_DIR}/bin/python", f"{inside}/{pips[-1].name}/pip", "install",
             "--quiet", "--no-index", "--no-cache-dir", "--disable-pip-version-check", "--find-links", inside,
             AWS_CLI], timeout=600)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    link = Path(root) / "usr/local/bin/aws"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(f"{AWS_CLI_DIR}/bin/aws")


def boot_result(read: Callable[[str], str]) -> str | None:
    """The first-boot run's result (``success 0 <time>``, ``exit-code 1 <time>``), or None while it runs;
    ``read(command)`` runs a command on the host and returns its output. A read past its time limit is "still
    running": a host busy with its user data may answer late (CI run 9 of the eighth session)."""
    try:
        out = read(f"cat {BOOT_FINISHED} 2>/dev/null || true").strip()
    except subprocess.TimeoutExpired:
        return None
    return out or None


def wait_boot(read: Callable[[str], str], timeout: float, *, say: Callable[[str], None] = lambda _line: None,
              every: float = 5.0, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> str:
    """Wait (at most ``timeout`` s) until the user data has run; its result, or a one-line error past the bound."""
    start = clock()
    said = start
    while True:
        result = boot_result(read)
        if result is not None:
            return result
        now = clock()
        if now - start >= timeout:
            raise SandboxError(f"the user data still runs after {timeout:.0f} s (its output: {OUTPUT_LOG} on the "
                               "host)")
        if now - said >= 30:
            say(f"user data running for {now - start:.0f} s")
            said = now
        sleep(every)

