"""Controller-side services on the bridge address: the repositories (HTTP), IMDS and S3 (moto); and the
supplies they serve (signed repositories, the Triton image archive, the sample model repository).

Each started service is recorded in the state as ``{"pid", "argv", "port"}``: the full command line with
its paths. It is found again (and stopped) by that record, whatever the environment says later.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tritonfleet.sandbox import layout, machine
from tritonfleet.sandbox.layout import (
    BRIDGE_IP,
    IMDS_PORT,
    PROMETHEUS_PORT,
    REPO_PORT,
    S3_BUCKET,
    S3_PORT,
    S3_PREFIX,
    S3_REGION,
    SAMPLES,
    images_dir,
    imds_hosts_file,
    log,
    logs_dir,
    monitoring_dir,
    repo_root,
    s3_endpoint,
    save_state,
)
from tritonfleet.sandbox.network import check_port_free


def ensure_supplies(base: Path) -> dict:
    """Signed repos, EFA installer, the PyPI index and the Triton image archive (cached; fast when unchanged)."""
    from tritonfleet.sandbox import aptrepo, dcgmimage, image, pypi

    cache = layout.CACHE_DIR
    log("checking signed repositories and the Triton image archive (built once, then cached)")
    t0 = time.monotonic()
    repos = aptrepo.build_all(repo_root(), cache / "repo-cache", base, os.uname().release)
    # a few wheels for image builds with triton_python_requirements (layout.pypi_index_url), fetched once
    python_index = pypi.ensure_index(repo_root(), cache / "repo-cache")
    images_dir().mkdir(parents=True, exist_ok=True)
    archive = image.build_triton_image(cache / "image-cache", images_dir() / "tritonserver-2.51.0-sandbox.tar")
    # the DCGM exporter's stand-in image (GPU hosts' monitoring), on the same cached base layer
    dcgmimage.build_dcgm_image(cache / "image-cache", images_dir() / dcgmimage.ARCHIVE_NAME)
    spent = time.monotonic() - t0
    if spent > 2:  # only worth saying when something was (re)built
        log(f"signed repositories and the Triton image archive ready in {spent:.0f}s")
    return {"repos": repos, "image_archive": archive, "pypi": python_index}


def wanted_services(cache: Path) -> dict[str, tuple[int, list[str]]]:
    """``{name: (port, argv)}`` of the services serving from ``cache``."""
    py = sys.executable
    return {
        "repo": (REPO_PORT, [py, "-m", "http.server", str(REPO_PORT), "--bind", BRIDGE_IP,
                             "--directory", str(repo_root(cache))]),
        "imds": (IMDS_PORT, [py, "-m", "tritonfleet.sandbox.imds", "--bind", BRIDGE_IP, "--port", str(IMDS_PORT),
                             "--hosts-file", str(imds_hosts_file())]),
        # moto's server, with the Auto Scaling launch wait moto lacks (awsapi.py): S3, SSM, EC2, Auto Scaling...
        "s3": (S3_PORT, [py, "-m", "tritonfleet.sandbox.awsapi", "-H", BRIDGE_IP, "-p", str(S3_PORT)]),
        # Debian's prometheus (make prereqs installs it), scraping the targets `tritonfleet monitoring targets`
        # writes for the sandbox inventory (write_monitoring_targets)
        # (paths as arguments of their own: a leftover from another state directory is still recognised)
        "prometheus": (PROMETHEUS_PORT, [PROMETHEUS, "--config.file", str(monitoring_dir() / "prometheus.yml"),
                                         "--storage.tsdb.path", str(layout.STATE_DIR / "prometheus-data"),
                                         "--storage.tsdb.retention.time=2d",
                                         f"--web.listen-address={BRIDGE_IP}:{PROMETHEUS_PORT}"]),
    }


PROMETHEUS = "/usr/bin/prometheus"
#: the sandbox Prometheus' scrape interval (short, so tests see new samples soon)
SCRAPE_INTERVAL = "5s"


def write_monitoring_targets() -> dict[str, int]:
    """``tritonfleet monitoring targets --scrape-config`` for the sandbox inventory, into :func:`monitoring_dir`
    (Prometheus re-reads the target files by itself). Without hosts: empty target files."""
    from tritonfleet.face.monitoring import JOBS, scrape_config, write_targets

    out = monitoring_dir()
    out.mkdir(parents=True, exist_ok=True)
    if not layout.hosts_from_state(layout.load_state()):
        for job in JOBS:
            (out / f"{job}.json").write_text("[]\n")
        (out / "prometheus.yml").write_text(scrape_config(out, interval=SCRAPE_INTERVAL))
        return dict.fromkeys(JOBS, 0)
    inventory = Path(__file__).resolve().parents[2] / "inventories" / "sandbox.py"
    config = out / "prometheus.yml"
    before = config.read_text() if config.exists() else None
    counts = write_targets(inventory, out, with_config=True, interval=SCRAPE_INTERVAL)
    if before is not None and config.read_text() != before:
        reload_prometheus()
    return counts


def reload_prometheus() -> None:
    """A running sandbox Prometheus re-reads prometheus.yml (new jobs; target files it re-reads by itself)."""
    state = layout.load_state()
    for pid, name in recorded_pids(state).items():
        if name == "prometheus":
            log(f"prometheus.yml changed: reloading Prometheus (pid {pid})")
            os.kill(pid, signal.SIGHUP)


def _shape(args: list[str]) -> list[str]:
    """A command line without its interpreter and with paths reduced to their last part."""
    if args and Path(args[0]).name.startswith("python"):
        args = args[1:]
    return [Path(a).name if a.startswith("/") else a for a in args]


def _runs(proc_argv: list[str], args: list[str]) -> bool:
    """``proc_argv`` (from /proc) is ``args``, run directly or as a script by its ``#!`` interpreter."""
    return bool(args) and proc_argv[-len(args):] == args and len(proc_argv) - len(args) <= 2


def is_recorded(pid: int, record: dict | int) -> bool:
    """``pid`` is alive and runs the command line recorded for it (a bare pid: an older state file)."""
    if isinstance(record, int):
        return machine.pid_alive(pid) and looks_like_service(machine.argv(pid))
    return machine.pid_alive(pid) and _runs(machine.argv(pid), record.get("argv", []))


def looks_like_service(proc_argv: list[str]) -> bool:
    """``proc_argv`` runs one of our services on the bridge address and ports, from whatever cache
    directory (for processes no state records any more)."""
    shape = _shape(proc_argv)
    return any(shape == _shape(args) for _, args in wanted_services(Path("/")).values())


def recorded_pids(state: dict) -> dict[int, str]:
    """``{pid: name}`` of the services the state records that still run."""
    out = {}
    for name, record in state.get("services", {}).items():
        pid = record if isinstance(record, int) else record.get("pid", 0)
        if pid and is_recorded(pid, record):
            out[pid] = name
    return out


def stop_services(state: dict) -> None:
    """Stop the services the state records (by their recorded command lines)."""
    machine.terminate(recorded_pids(state))


def _spawn_service(name: str, cmd: list[str]) -> int:
    with open(logs_dir() / f"{name}.log", "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=layout.STATE_DIR)
    return proc.pid


def ensure_services(state: dict) -> None:
    """Start the services that do not run as wanted (a service from another cache directory is restarted)."""
    services = state.setdefault("services", {})
    if not imds_hosts_file().exists():
        imds_hosts_file().write_text("{}")
    state["cache_dir"] = str(layout.CACHE_DIR)
    if not (monitoring_dir() / "prometheus.yml").exists():
        write_monitoring_targets()
    for name, (port, cmd) in wanted_services(layout.CACHE_DIR).items():
        record = services.get(name)
        pid = record if isinstance(record, int) else (record or {}).get("pid", 0)
        if pid and is_recorded(pid, record):
            if isinstance(record, dict) and record.get("argv") == cmd:
                continue
            log(f"restarting the {name} service (it ran as `{machine.cmdline(pid)[:120]}`)")
            machine.terminate([pid])
        check_port_free(port)
        pid = _spawn_service(name, cmd)
        services[name] = {"pid": pid, "argv": cmd, "port": port}
        save_state(state)
        machine.wait_port(BRIDGE_IP, port, 30, f"the sandbox {name} service", pid)
    seed_s3()


def seed_s3() -> None:
    """Create the bucket and upload the sample model repository (idempotent)."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_endpoint(), region_name=S3_REGION,
                      aws_access_key_id="sandbox", aws_secret_access_key="sandbox")
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if S3_BUCKET not in existing:
        s3.create_bucket(Bucket=S3_BUCKET)
    for path in sorted(SAMPLES.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            s3.upload_file(str(path), S3_BUCKET, S3_PREFIX + path.relative_to(SAMPLES).as_posix())
