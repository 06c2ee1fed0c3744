"""tritonfleet.fleet.bundle on a small project tree: the archive's entries carry no owner, time or umask of the
machine that built it, its gzip header no time or name, and the upload sends what S3 checks. Written for the
mutants ``make mutate`` found surviving (docs/mutation-survivors.md)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from tritonfleet.fleet.bundle import (
    DATA_FILE,
    INVENTORY,
    build_bundle,
    publish_bundle,
    secret_env_name,
)
from tritonfleet.fleet.tags import FleetError


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    files = {"tritonfleet/__init__.py": 0o664, "tritonfleet/run.sh": 0o775, "tritonfleet/odd.txt": 0o666,
             "roles/a.py": 0o644, "deploys/serve.py": 0o644, "templates/t.j2": 0o644,
             "inventories/group_data/all.py": 0o644, "pyproject.toml": 0o644, "README.md": 0o644}
    for name, mode in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
        (root / name).chmod(mode)
    (root / "roles").chmod(0o775)
    (root / "tritonfleet" / "templates").symlink_to(Path("..") / "templates")
    return root


def members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_secret_env_names():
    assert secret_env_name("repository-secret") == "TRITONFLEET_SECRET_REPOSITORY_SECRET"
    assert secret_env_name("hf.token9") == "TRITONFLEET_SECRET_HF_TOKEN9"


def test_mixed_case_secret_keys_are_allowed(tree, tmp_path):
    bundle = build_bundle(tree, {}, tmp_path / "out", secret_parameters={"HfToken": "/tritonfleet/hf"})
    assert bundle.secret_env == {"HfToken": "TRITONFLEET_SECRET_HFTOKEN"}


def test_entries_carry_no_owner_time_or_umask_of_the_builder(tree, tmp_path):
    bundle = build_bundle(tree, {"b": 1, "a": [2]}, tmp_path / "out" / "nested")
    entries = members(bundle.path)
    assert all((m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", 0) for m in entries.values())
    modes = {name: entries[name].mode for name in ("tritonfleet/__init__.py", "tritonfleet/run.sh",
                                                    "tritonfleet/odd.txt", "roles", DATA_FILE, INVENTORY)}
    assert modes == {"tritonfleet/__init__.py": 0o644, "tritonfleet/run.sh": 0o755, "tritonfleet/odd.txt": 0o644,
                     "roles": 0o755, DATA_FILE: 0o644, INVENTORY: 0o644}
    link = entries["tritonfleet/templates"]
    assert link.issym() and link.linkname == "../templates"
    assert link.mode == os.lstat(tree / "tritonfleet" / "templates").st_mode & 0o7777
    assert "tritonfleet/templates/t.j2" not in entries  # the link, not a second copy of templates/


def test_data_file_and_inventory(tree, tmp_path):
    bundle = build_bundle(tree, {"b": 1, "a": [2]}, tmp_path / "out")
    with tarfile.open(bundle.path) as tar:
        data = tar.extractfile(DATA_FILE).read().decode()
        inventory = tar.extractfile(INVENTORY).read().decode()
    assert data == '{\n  "a": [\n    2\n  ],\n  "b": 1\n}\n'
    assert "pyinfra -y inventories/fleet_local.py deploys/serve.py" in inventory


def test_gzip_header_has_no_time_and_no_name(tree, tmp_path):
    bundle = build_bundle(tree, {}, tmp_path / "out")
    header = bundle.path.read_bytes()[:10]
    assert header[3] & 0x08 == 0 and header[4:8] == b"\0\0\0\0"  # FNAME flag unset, MTIME 0
    assert bundle.path.name == bundle.key_name == f"tritonfleet-bundle-{bundle.sha256[:16]}.tar.gz"


def test_a_missing_entry_is_named(tree, tmp_path):
    (tree / "README.md").unlink()
    with pytest.raises(FleetError, match=r"^cannot build the bundle: .*README.md is missing"):
        build_bundle(tree, {}, tmp_path / "out")


class S3:
    def __init__(self, fail=False):
        self.fail, self.put = fail, []

    def put_object(self, **kwargs):
        if self.fail:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "PutObject")
        self.put.append(kwargs)


def test_publish_sends_the_checksum_and_keys_under_the_prefix(tree, tmp_path):
    bundle = build_bundle(tree, {}, tmp_path / "out")
    s3 = S3()
    assert publish_bundle(s3, bundle, "s3://bucket/fleet/prod/") == f"s3://bucket/fleet/prod/{bundle.key_name}"
    assert publish_bundle(s3, bundle, "s3://bucket") == f"s3://bucket/{bundle.key_name}"
    sent = s3.put[0]
    assert (sent["Bucket"], sent["Key"], sent["ChecksumAlgorithm"], sent["Metadata"]) == (
        "bucket", f"fleet/prod/{bundle.key_name}", "SHA256", {"sha256": bundle.sha256})
    assert sent["Body"] == bundle.path.read_bytes()


def test_publish_errors_are_one_line(tree, tmp_path):
    bundle = build_bundle(tree, {}, tmp_path / "out")
    with pytest.raises(FleetError) as info:
        publish_bundle(S3(fail=True), bundle, "s3://bucket/p")
    assert str(info.value) == f"cannot upload the bundle to s3://bucket/p/{bundle.key_name}: AccessDenied: no"
    with pytest.raises(FleetError, match=r"^--bundle-s3 'bucket': expected s3://bucket/prefix"):
        publish_bundle(S3(), bundle, "bucket")



def test_a_top_level_entry_that_is_a_link_stays_a_link(tree, tmp_path):
    shared = tmp_path / "shared-group-data"
    shared.mkdir()
    (shared / "all.py").write_text("x = 1\n")
    data = tree / "inventories" / "group_data"
    (data / "all.py").unlink()
    data.rmdir()
    data.symlink_to(shared)
    entries = members(build_bundle(tree, {}, tmp_path / "out").path)
    assert entries["inventories/group_data"].issym()
    assert "inventories/group_data/all.py" not in entries
