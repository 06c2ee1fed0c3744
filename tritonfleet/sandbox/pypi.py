"""A small local PyPI "simple" index (PEP 503) for the sandbox, served by its repository service.

Sandbox hosts reach no package index, so the few wheels that image builds with ``triton_python_requirements``
install are downloaded once into the cache (``pip download --only-binary=:all: --no-deps``, checked against the
sha256 pinned here) and published under the served root (:func:`layout.repo_root`)::

    pypi/simple/index.html                  the project list
    pypi/simple/<project>/index.html        links to ../../files/<wheel>#sha256=<hex> (data-requires-python)
    pypi/files/<wheel>

URL: :func:`layout.pypi_index_url` (``http://192.168.250.1:8080/pypi/simple/``). Like the apt repositories, the
tree is rebuilt only when its inputs change (a stamp of the wheels' names and hashes) and swapped in whole.

A host booted from user data (``tritonfleet sandbox boot``, :mod:`tritonfleet.sandbox.cloudinit`) installs a whole
fleet bundle with pip, as an Auto Scaling group's instance does from PyPI: for that the index also serves the host
wheels (:func:`fetch_host_wheels`): the bundle's dependencies at the versions this controller runs, its build
requirements and pip, for the hosts' Python (Debian 12's), and the AWS CLI an AMI ships, with its own dependencies.
They are downloaded on the first boot and served from then on.
"""

from __future__ import annotations

import email.parser
import hashlib
import html
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from tritonfleet import wheelhouse
from tritonfleet.pyreqs import pip_failure
from tritonfleet.sandbox.aptrepo import _link_or_copy, _staged, _stamp_matches
from tritonfleet.sandbox.fsutil import sha256_file
from tritonfleet.sandbox.layout import PYPI_PATH, SandboxError, build_lock

try:  # Python 3.11+; before, pip's own copy of the same parser
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

RECIPE_VERSION = "1"


@dataclass(frozen=True)
class Wheel:
    """A wheel the sandbox serves: ``name==version``, its file name on PyPI and that file's sha256."""

    name: str
    version: str
    filename: str
    sha256: str

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


#: Pure-Python wheels the sandbox's Triton image lacks (it has Debian's numpy and nothing else from PyPI:
#: image.BASE_INCLUDE), hashes as PyPI lists them. emoji: the sample model ``emoji_echo`` imports it.
WHEELS: tuple[Wheel, ...] = (
    Wheel("emoji", "2.14.0", "emoji-2.14.0-py3-none-any.whl",
          "fcc936bf374b1aec67dda5303ae99710ba88cc9cdce2d1a71c5f2204e6d78799"),
    Wheel("tabulate", "0.9.0", "tabulate-0.9.0-py3-none-any.whl",
          "024ca478df22e9340661486f85298cff5f6dcdba14f3813e8830015b9ed1948f"),
)


#: The AWS CLI of a host booted from user data, as an AMI ships one (the ASG user data runs ``aws``): version 1, from
#: PyPI, whose botocore takes its endpoint from ``AWS_ENDPOINT_URL`` (the sandbox's AWS, as boto3 does).
AWS_CLI = "awscli==1.46.3"
#: The sandbox hosts' Python (Debian 12) and the platform tags of their wheels (glibc 2.36)
HOST_PYTHON = "3.11"
HOST_GLIBC = (17, 24, 27, 28, 31, 34, 36)
HOST_WHEELS_RECIPE = "1"


def requirement_lines(wheels: Sequence[Wheel] = WHEELS, *, hashes: bool = True) -> list[str]:
    """``triton_python_requirements`` lines for ``wheels`` (with their hashes: pip's --require-hashes)."""
    return [w.pin + (f" --hash=sha256:{w.sha256}" if hashes else "") for w in wheels]


# ------------------------------------------------------------------------------------------ download


def fetch_wheels(cache_dir: Path, wheels: Sequence[Wheel] = WHEELS, *, index_url: str | None = None,
                 pip_args: Sequence[str] = ()) -> list[Path]:
    """The wheel files of ``wheels`` under ``cache_dir/pypi-wheels/``, downloaded once (pip, with the
    controller's pip configuration; ``index_url`` replaces its index, ``pip_args`` go before pip's command) and
    checked against their pinned sha256."""
    out = Path(cache_dir) / "pypi-wheels"
    out.mkdir(parents=True, exist_ok=True)
    missing = [w for w in wheels if not _verified(out / w.filename, w.sha256)]
    if missing:
        with tempfile.TemporaryDirectory(prefix=".download-", dir=out) as tmp:
            reqs = Path(tmp) / "requirements.txt"
            reqs.write_text("".join(f"{line}\n" for line in requirement_lines(missing)), encoding="ascii")
            dest = Path(tmp) / "wheels"
            _pip_download(["--only-binary=:all:", "--no-deps", "--require-hashes", "--dest", str(dest), "-r", str(reqs),
                           # the files for the images' Pythons, whatever this one is (the image's pip checks it)
                           "--ignore-requires-python"], "the sandbox's PyPI wheels", index_url=index_url,
                          pip_args=pip_args, timeout=600)
            for w in missing:
                got = dest / w.filename
                if not got.is_file():
                    names = sorted(p.name for p in dest.glob("*.whl"))
                    raise SandboxError(f"pip download {w.pin} gave {names or 'nothing'}, not {w.filename}")
                if sha256_file(got) != w.sha256:  # pip checked it too; the cache must never hold another file
                    raise SandboxError(f"{w.filename}: sha256 {sha256_file(got)} is not the pinned {w.sha256}")
                os.replace(got, out / w.filename)
    return [out / w.filename for w in wheels]


def _pip_download(args: Sequence[str], what: str, *, index_url: str | None, pip_args: Sequence[str],
                  timeout: float) -> None:
    """``pip download ARGS`` with this controller's pip (``index_url`` replaces its index); a one-line error naming
    ``what`` when it fails."""
    cmd = [sys.executable, "-m", "pip", *pip_args, "download", "--disable-pip-version-check", "--no-input", *args]
    if index_url:
        cmd += ["--index-url", index_url]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
    if proc.returncode != 0:
        raise SandboxError(f"downloading {what} failed: {pip_failure(proc.stdout + proc.stderr)}")


def _verified(path: Path, sha256: str) -> bool:
    try:
        return sha256_file(path) == sha256
    except OSError:
        return False


# --------------------------------------------------------------------------------------------- index


def wheel_metadata(path: Path) -> tuple[str, str, str]:
    """(canonical project name, version, Requires-Python or "") from a wheel's ``METADATA``."""
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise SandboxError(f"{path.name}: not a wheel (no single *.dist-info/METADATA)")
        meta = email.parser.Parser().parsestr(zf.read(names[0]).decode("utf-8"), headersonly=True)
    if not meta.get("Name") or not meta.get("Version"):
        raise SandboxError(f"{path.name}: its METADATA has no Name or Version")
    return canonicalize_name(meta["Name"]), meta["Version"], meta.get("Requires-Python", "") or ""


def _page(title: str, links: list[str]) -> bytes:
    body = "\n".join(f"    {link}<br/>" for link in links)
    return (f'<!DOCTYPE html>\n<html>\n  <head><meta name="pypi:repository-version" content="1.0">'
            f"<title>{html.escape(title)}</title></head>\n  <body>\n{body}\n  </body>\n</html>\n").encode()


def build_index(root: Path, wheels: Sequence[Path]) -> Path:
    """Publish ``wheels`` as a PEP 503 index under ``root/pypi/`` (see the module doc); returns the simple
    index directory ``root/pypi/simple``. Unchanged inputs: nothing is written."""
    root = Path(root)
    entries = []
    for path in sorted(Path(w) for w in wheels):
        name, version, requires_python = wheel_metadata(path)
        entries.append((name, version, requires_python, path, sha256_file(path)))
    h = hashlib.sha256(f"pypi\0{RECIPE_VERSION}\0".encode())
    for name, version, requires_python, path, digest in entries:
        h.update(f"{name}\0{version}\0{requires_python}\0{path.name}\0{digest}\0".encode())
    target = root / PYPI_PATH.split("/", 1)[0]
    if _stamp_matches(target, h.hexdigest()):
        return root / PYPI_PATH
    projects: dict[str, list[str]] = {}
    with _staged(target, h.hexdigest()) as tmp:
        for name, _version, requires_python, path, digest in entries:
            _link_or_copy(path, tmp / "files" / path.name)
            attr = f' data-requires-python="{html.escape(requires_python)}"' if requires_python else ""
            projects.setdefault(name, []).append(
                f'<a href="../../files/{html.escape(path.name)}#sha256={digest}"{attr}>{html.escape(path.name)}</a>')
        (tmp / "files").mkdir(mode=0o755, exist_ok=True)
        simple = tmp / "simple"
        simple.mkdir(mode=0o755)
        for name, links in sorted(projects.items()):
            (simple / name).mkdir(mode=0o755)
            (simple / name / "index.html").write_bytes(_page(f"Links for {name}", links))
        (simple / "index.html").write_bytes(_page("Simple index", [f'<a href="{n}/">{n}</a>' for n in sorted(projects)]))
    return root / PYPI_PATH


def ensure_index(root: Path, cache_dir: Path, wheels: Sequence[Wheel] = WHEELS, *,
                 index_url: str | None = None, pip_args: Sequence[str] = (), host_project: Path | None = None) -> dict:
    """Download (once) and publish the sandbox's wheels; ``{"url_path", "packages": {name: version}}``.

    ``host_project``: also the host wheels for that project's bundles (downloaded when missing); without it, the
    host wheels already downloaded for the current inputs are published too."""
    files = fetch_wheels(cache_dir, wheels, index_url=index_url, pip_args=pip_args)
    project = host_project or Path(__file__).resolve().parents[2]
    files += fetch_host_wheels(cache_dir, project, index_url=index_url, pip_args=pip_args,
                               download=host_project is not None)
    build_index(root, files)
    return {"url_path": PYPI_PATH, "packages": {canonicalize_name(w.name): w.version for w in wheels}}


# ------------------------------------------------------------------------------------- host wheels


def controller_constraints() -> list[str]:
    """``name==version`` of every distribution this controller's Python has (the project itself left out): the
    versions a booted host gets are the ones that run here."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and canonicalize_name(name) != "tritonfleet":
            found[canonicalize_name(name)] = dist.version
    return sorted(f"{name}=={version}" for name, version in found.items())


def bundle_requirements(project: Path) -> list[str]:
    """What ``pip install BUNDLE`` takes from an index: the project's dependencies, its build requirements (pip
    builds the bundle in an isolated environment) and pip (a venv's own, upgraded from the index)."""
    try:
        data = tomllib.loads((Path(project) / "pyproject.toml").read_text(encoding="utf-8"))
        return [*data["project"]["dependencies"], *data["build-system"]["requires"], "pip"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise SandboxError(f"{project}/pyproject.toml: no [project] dependencies or [build-system] requires "
                           f"({exc})") from None


def _host_platform_args(machine: str) -> list[str]:
    tags = [f"manylinux2014_{machine}"] + [f"manylinux_2_{v}_{machine}" for v in HOST_GLIBC]
    return ["--only-binary=:all:", "--python-version", HOST_PYTHON, "--implementation", "cp",
            *(arg for tag in tags for arg in ("--platform", tag))]


def fetch_host_wheels(cache_dir: Path, project: Path, *, index_url: str | None = None, pip_args: Sequence[str] = (),
                      download: bool = True) -> list[Path]:
    """The host wheels (module doc) under ``cache_dir/host-wheels/<key>/``, by ``pip download`` for the hosts'
    Python and machine: the bundle's requirements constrained to :func:`controller_constraints`; :data:`AWS_CLI`
    with its own dependencies (it pins its botocore); what the agent's wheelhouse is built from. The key covers
    every input, so a changed dependency downloads again. ``download`` False: only what is already there (``[]``
    if nothing is)."""
    machine = platform.machine()
    constraints, requirements = controller_constraints(), bundle_requirements(project)
    host = _host_platform_args(machine)
    runs: list[tuple[list[str], bool, list[str]]] = [  # (requirements, constrained, pip's platform arguments)
        (requirements, True, host),
        ([AWS_CLI], False, host),
        # the booted host deploys as its own controller: it builds the agent's wheelhouse (tritonfleet/wheelhouse.py)
        # from the index, pure wheels for every host Python the agent supports and the QA and live extras for its own
        *[([*wheelhouse.REQUIREMENTS, "pip"], False, ["--only-binary=:all:", "--python-version", python])
          for python in wheelhouse.PYTHONS],
        ([*wheelhouse.QA_REQUIREMENTS, *wheelhouse.LIVE_REQUIREMENTS, *wheelhouse.QA_HTTP_REQUIREMENTS], False, host),
    ]
    key = hashlib.sha256(json.dumps([HOST_WHEELS_RECIPE, HOST_PYTHON, machine, constraints, runs]).encode()
                         ).hexdigest()[:16]
    top = Path(cache_dir) / "host-wheels"
    out = top / key
    if (out / ".complete").exists():
        return sorted(out.glob("*.whl"))
    if not download:
        return []
    with build_lock(top, f"host-wheels-{key}"):  # another process (the prefetch) may be downloading them
        if not (out / ".complete").exists():
            _download_host_wheels(top, out, key, constraints, runs, index_url, pip_args)
    return sorted(out.glob("*.whl"))


def _download_host_wheels(top: Path, out: Path, key: str, constraints: list[str],
                          runs: list[tuple[list[str], bool, list[str]]], index_url: str | None,
                          pip_args: Sequence[str]) -> None:
    with tempfile.TemporaryDirectory(prefix=".download-", dir=top) as tmp:
        cons = Path(tmp) / "constraints.txt"
        cons.write_text("".join(f"{line}\n" for line in constraints), encoding="utf-8")
        dest = Path(tmp) / "wheels"
        for what, constrained, platform_args in runs:
            _pip_download([*platform_args, "--dest", str(dest), *(["-c", str(cons)] if constrained else []), *what],
                          "the wheels of a booted host's bundle", index_url=index_url, pip_args=pip_args,
                          timeout=900)
        (dest / ".complete").write_text(key + "\n")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(dest, out)

