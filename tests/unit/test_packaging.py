"""What ships: a wheel built from the tree holds the code and every file it reads at run time, and the
project's text names no path of a development machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> set[str]:
    out = tmp_path_factory.mktemp("wheel")
    src = tmp_path_factory.mktemp("src")  # a clean copy: no build/ leftovers from earlier builds
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for f in files:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / f).is_symlink():
            (src / f).symlink_to(os.readlink(ROOT / f))
        elif (ROOT / f).is_file():
            shutil.copy2(ROOT / f, src / f)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(src)], check=True, capture_output=True, timeout=300)
    (whl,) = out.glob("tritonfleet-*.whl")
    with zipfile.ZipFile(whl) as z:
        return set(z.namelist())


def test_wheel_holds_every_runtime_file(wheel_names):
    tracked = subprocess.run(["git", "ls-files", "tritonfleet", "templates", "roles"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.split()
    wanted = set()
    for path in tracked:
        if (ROOT / path).is_symlink():
            continue
        if path.startswith("templates/"):
            path = "tritonfleet/" + path  # shipped through the tritonfleet/templates link
        wanted.add(path)
    missing = sorted(wanted - wheel_names)
    assert not missing, f"not in the wheel: {missing}"
    for needed in ("tritonfleet/templates/scripts/triton-swap.sh", "tritonfleet/sandbox/files/runc-clamp",
                   "tritonfleet/sandbox/samples/add_sub/config.pbtxt", "tritonfleet/sandbox/samples/add_sub/1/model.py",
                   "tritonfleet/templates/genmodel/model.py.j2", "roles/triton.py"):
        assert needed in wheel_names


def test_no_development_machine_paths():
    files = subprocess.run(["git", "ls-files", "*.py", "*.md", "Makefile", "*.sh", "*.j2"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    bad = []
    for f in files:
        text = (ROOT / f).read_text(errors="replace")
        for word in ("/" + "work/", "/" + "farm/"):
            at = text.find(word)
            if at >= 0 and (at == 0 or not (text[at - 1].isalnum() or text[at - 1] in "._")):
                bad.append(f"{f}: ...{text[max(0, at - 20):at + 30]!r}")
    assert not bad, bad


def test_python_targets_need_no_root():
    """`make lint` and `make test-unit` install only Python packages; Debian packages are `make prereqs`."""
    for target in ("lint", "test-unit", "setup"):
        plan = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        assert "apt-get" not in plan and "dpkg" not in plan, f"make {target} would run: {plan}"
    plan = subprocess.run(["make", "-n", "-B", "test"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "apt-get" in plan  # `make test` still installs everything
