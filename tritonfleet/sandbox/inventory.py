"""Host data for ``inventories/sandbox.py``, derived from the sandbox state."""

from __future__ import annotations

from tritonfleet import catalog
from tritonfleet.sandbox import layout
from tritonfleet.sandbox.dcgmimage import ARCHIVE_NAME as DCGM_ARCHIVE
from tritonfleet.sandbox.dcgmimage import DEFAULT_TAG as DCGM_TAG


def sandbox_hosts(names: list[str] | None = None, *, accelerated: bool | None = None) -> list[tuple[str, dict]]:
    """``[(name, data), ...]`` for the running sandbox hosts (all, or ``names``); ``accelerated`` True: only the
    hosts whose instance type has an accelerator (the Triton hosts), False: only the others (load balancers)."""
    state = layout.load_state()
    hosts = layout.hosts_from_state(state)
    if not hosts:
        raise SystemExit("the sandbox is not up: run `make sandbox-up` (or `tritonfleet sandbox up`)")
    supplies = state.get("supplies", {})
    repos = supplies.get("repos", {})
    base = f"http://{layout.BRIDGE_IP}:{layout.REPO_PORT}"
    common = {
        "ssh_user": "root",
        "ssh_key": str(layout.key_path()),
        "ssh_known_hosts_file": str(layout.known_hosts_path()),
        "ssh_strict_host_key_checking": "yes",
        "imds_endpoint": f"http://{layout.BRIDGE_IP}:{layout.IMDS_PORT}",
        # the models role's keys: the sandbox serves the sample repository it seeds into its S3 (moto)
        "models_s3_endpoint": layout.s3_endpoint(),
        "models_s3_region": layout.S3_REGION,
        "models_s3_uri": f"s3://{layout.S3_BUCKET}/{layout.S3_PREFIX}",
        # QA: the sample model's suite, reports of scheduled runs into the sandbox's S3
        "qa_suites": str(layout.QA_SUITES),
        "qa_reports_s3_uri": f"s3://{layout.S3_BUCKET}/qa-reports",
        "qa_reports_s3_endpoint": layout.s3_endpoint(),
        "qa_reports_s3_region": layout.S3_REGION,
        "triton_image_source": "archive",
        "triton_repository_secret": state.get("repository_secret"),
        "triton_image": "tritonfleet-sandbox/tritonserver:2.51.0-sandbox",
        "triton_image_archive": "/srv/images/tritonserver-2.51.0-sandbox.tar",
        # monitoring: the DCGM exporter's stand-in image, loaded from its archive like Triton's
        "monitoring_dcgm_image": DCGM_TAG,
        "monitoring_dcgm_image_source": "archive",
        "monitoring_dcgm_image_archive": f"/srv/images/{DCGM_ARCHIVE}",
    }
    if supplies.get("pypi"):  # the repository server's PyPI simple index: triton_python_requirements builds
        common["triton_pip_index"] = layout.pypi_index_url()
    if "neuron" in repos:
        neuron = repos["neuron"]
        common.update({
            "neuron_apt_url": f"{base}/{neuron['url_path'].strip('/')}",
            "neuron_apt_suite": neuron.get("suite") or "bookworm",
            "neuron_key_fingerprint": neuron["fingerprint"],
        })
    if "nvidia" in repos:
        nvidia = repos["nvidia"]
        common.update({
            "nvidia_toolkit_apt_url": f"{base}/{nvidia['url_path'].strip('/')}",
            "nvidia_key_url": f"{base}/nvidia/gpgkey",
            "nvidia_key_fingerprint": nvidia["fingerprint"],
        })
    if "efa" in repos:
        efa = repos["efa"]
        common.update({
            "efa_installer_url": f"{base}/{efa['url_path'].strip('/')}/aws-efa-installer-latest.tar.gz",
            "efa_key_url": f"{base}/{efa['url_path'].strip('/')}/aws-efa-installer.key",
            "efa_key_fingerprint": efa["fingerprint"],
        })
    out = []
    for h in hosts:
        if names and h.name not in names:
            continue
        if accelerated is not None and catalog.get(h.instance_type).has_accelerator != accelerated:
            continue
        out.append((h.name, {**common, "ssh_hostname": h.ip, "instance_type": h.instance_type}))
    return out
