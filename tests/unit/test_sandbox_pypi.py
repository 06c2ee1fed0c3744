"""The sandbox's PyPI simple index (tritonfleet/sandbox/pypi.py): built in a temporary directory from wheels
built here (no network), then installed from by pip over file:// and over HTTP on loopback, as image builds
do. Also: where ``sandbox up`` builds it, its URL, and the ``emoji_echo`` sample that needs it."""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tritonfleet import pyreqs
from tritonfleet.sandbox import image, layout, pypi, services
from tritonfleet.sandbox.layout import SandboxError

#: pip without this machine's pip configuration (its extra indexes, find-links and constraints)
PIP = [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _project(root: Path, name: str, version: str, requires_python: str = ">=3.8") -> Path:
    src = root / f"{name}-{version}"
    module = name.lower().replace("-", "_")
    (src / module).mkdir(parents=True)
    (src / module / "__init__.py").write_text(f'VERSION = "{version}"\n')
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\nrequires-python = "{requires_python}"\n'
        f'[tool.setuptools]\npackages = ["{module}"]\n')
    return src


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Pure-Python wheels built here: ``Tiny_Emoji`` 1.0 and 1.1, ``tiny-tab`` 0.9 (``<3`` Requires-Python)."""
    base = tmp_path_factory.mktemp("wheels")
    sources = [_project(base, "Tiny_Emoji", "1.0"), _project(base, "Tiny_Emoji", "1.1"),
               _project(base, "tiny-tab", "0.9", requires_python="<3,>=2.7")]
    out = base / "dist"
    for src in sources:  # one by one: pip takes one version of a project per run
        subprocess.run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--ignore-requires-python",
                        "-q", "-w", str(out),
                        str(src)], check=True, capture_output=True, timeout=300)
    found = {p.name: p for p in out.glob("*.whl")}
    assert sorted(found) == ["tiny_emoji-1.0-py3-none-any.whl", "tiny_emoji-1.1-py3-none-any.whl",
                             "tiny_tab-0.9-py3-none-any.whl"]
    return found


@pytest.fixture
def index(tmp_path: Path, wheels: dict[str, Path]) -> Path:
    """``tmp_path/serve``: the served root with the index built from every wheel."""
    pypi.build_index(tmp_path / "serve", list(wheels.values()))
    return tmp_path / "serve"


@contextlib.contextmanager
def serving(root: Path):
    """``root`` over HTTP on a free loopback port, like the sandbox's repository service (http.server)."""
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


def pip_download(index_url: str, dest: Path, *requirements: str, args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*PIP, "download", "--no-deps", "--only-binary=:all:", "--index-url", index_url,
                           "--dest", str(dest), *args, *requirements],
                          capture_output=True, text=True, timeout=120, check=False)


# ------------------------------------------------------------------------------------------------ layout


def test_the_index_layout_pep_503(index: Path, wheels: dict[str, Path]):
    root = index / "pypi"
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == [
        ".tritonfleet-stamp", "files/tiny_emoji-1.0-py3-none-any.whl", "files/tiny_emoji-1.1-py3-none-any.whl",
        "files/tiny_tab-0.9-py3-none-any.whl", "simple/index.html", "simple/tiny-emoji/index.html",
        "simple/tiny-tab/index.html"]
    projects = re.findall(r'<a href="([^"]+)">([^<]+)</a>', (root / "simple/index.html").read_text())
    assert projects == [("tiny-emoji/", "tiny-emoji"), ("tiny-tab/", "tiny-tab")]  # normalized names
    page = (root / "simple/tiny-emoji/index.html").read_text()
    links = re.findall(r'<a href="([^"#]+)#sha256=([0-9a-f]{64})" data-requires-python="([^"]*)">([^<]+)</a>', page)
    assert links == [(f"../../files/{n}", sha256(wheels[n]), "&gt;=3.8", n)
                     for n in ("tiny_emoji-1.0-py3-none-any.whl", "tiny_emoji-1.1-py3-none-any.whl")]
    assert 'data-requires-python="&lt;3,&gt;=2.7"' in (root / "simple/tiny-tab/index.html").read_text()
    for link, digest, _, _name in links:
        assert sha256((root / "simple/tiny-emoji" / link).resolve()) == digest
    assert pypi.wheel_metadata(wheels["tiny_tab-0.9-py3-none-any.whl"]) == ("tiny-tab", "0.9", "<3,>=2.7")


def test_an_unchanged_index_is_not_rewritten_and_a_changed_one_is(tmp_path: Path, wheels: dict[str, Path]):
    serve = tmp_path / "serve"
    some = [wheels["tiny_emoji-1.0-py3-none-any.whl"]]
    pypi.build_index(serve, some)
    page = serve / "pypi/simple/tiny-emoji/index.html"
    inode = page.stat().st_ino
    assert pypi.build_index(serve, some) == serve / "pypi/simple"
    assert page.stat().st_ino == inode  # the stamp matched: nothing was written
    pypi.build_index(serve, [*some, wheels["tiny_emoji-1.1-py3-none-any.whl"]])
    assert "tiny_emoji-1.1" in page.read_text()
    assert sorted(p.name for p in serve.iterdir()) == ["pypi"]  # no build leftovers next to it


def test_a_file_that_is_no_wheel_is_refused(tmp_path: Path):
    bad = tmp_path / "bad-1.0-py3-none-any.whl"
    bad.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip
    with pytest.raises(SandboxError, match="bad-1.0-py3-none-any.whl: not a wheel"):
        pypi.build_index(tmp_path / "serve", [bad])


# ------------------------------------------------------------------------------------------ pip uses it


def test_pip_downloads_from_it_over_file_and_http(index: Path, tmp_path: Path, wheels: dict[str, Path]):
    got = pip_download((index / "pypi/simple").as_uri() + "/", tmp_path / "a", "tiny-emoji==1.0")
    assert got.returncode == 0, got.stdout + got.stderr
    assert sha256(tmp_path / "a/tiny_emoji-1.0-py3-none-any.whl") == sha256(wheels["tiny_emoji-1.0-py3-none-any.whl"])
    with serving(index) as base:
        # the image build's arguments (pyreqs), with the requirements.txt it renders, hashes and a marker
        reqs = pyreqs.parse([f"Tiny_Emoji==1.1 --hash=sha256:{sha256(wheels['tiny_emoji-1.1-py3-none-any.whl'])}",
                             f'tiny-tab==0.9; python_version >= "3" --hash=sha256:{"0" * 64}'])
        (tmp_path / "requirements.txt").write_text(reqs.render())
        url = f"{base}/{layout.PYPI_PATH}/"
        args = ("--require-hashes", *pyreqs.pip_index_args(url)[2:], "-r", str(tmp_path / "requirements.txt"))
        got = pip_download(url, tmp_path / "b", args=args)
        # tiny-tab's Requires-Python (<3) rules it out before its (wrong) hash is looked at
        assert got.returncode == 1
        assert pyreqs.pip_failure(got.stdout + got.stderr) == "tiny-tab==0.9: needs another Python (Requires-Python <3,>=2.7) than the image's"
        reqs = pyreqs.parse([f"Tiny_Emoji==1.1 --hash=sha256:{sha256(wheels['tiny_emoji-1.1-py3-none-any.whl'])}"])
        (tmp_path / "requirements.txt").write_text(reqs.render())
        got = pip_download(url, tmp_path / "b", args=args)
        assert got.returncode == 0, got.stdout + got.stderr
        assert [p.name for p in (tmp_path / "b").iterdir()] == ["tiny_emoji-1.1-py3-none-any.whl"]
        got = pip_download(url, tmp_path / "c", "tiny-emoji==9.9")
        assert pyreqs.pip_failure(got.stdout + got.stderr) == "tiny-emoji==9.9: no such version (the index has: 1.0, 1.1)"


# ------------------------------------------------------------------------------------ fetched once, checked


def _wheel(wheels: dict[str, Path], name: str, version: str, digest: str | None = None) -> pypi.Wheel:
    filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    return pypi.Wheel(name, version, filename, digest or sha256(wheels[filename]))


def test_wheels_are_fetched_once_into_the_cache(index: Path, tmp_path: Path, wheels: dict[str, Path], monkeypatch):
    source = (index / "pypi/simple").as_uri() + "/"
    wanted = [_wheel(wheels, "tiny-emoji", "1.1"), _wheel(wheels, "tiny-tab", "0.9")]
    got = pypi.fetch_wheels(tmp_path / "cache", wanted, index_url=source, pip_args=["--isolated"])
    assert got == [tmp_path / "cache/pypi-wheels" / w.filename for w in wanted]
    assert [sha256(p) for p in got] == [w.sha256 for w in wanted]

    def no_pip(*_a, **_k):
        raise AssertionError("pip ran although the cache holds the wheels")

    monkeypatch.setattr(pypi.subprocess, "run", no_pip)
    assert pypi.fetch_wheels(tmp_path / "cache", wanted, index_url=source) == got
    info = pypi.ensure_index(tmp_path / "serve", tmp_path / "cache", wanted, index_url=source)
    assert info == {"url_path": "pypi/simple", "packages": {"tiny-emoji": "1.1", "tiny-tab": "0.9"}}
    assert (tmp_path / "serve/pypi/simple/tiny-tab/index.html").is_file()


def test_a_cached_wheel_that_changed_is_fetched_again(index: Path, tmp_path: Path, wheels: dict[str, Path]):
    source = (index / "pypi/simple").as_uri() + "/"
    wanted = [_wheel(wheels, "tiny-emoji", "1.0")]
    (cached,) = pypi.fetch_wheels(tmp_path / "cache", wanted, index_url=source, pip_args=["--isolated"])
    cached.write_bytes(b"truncated")
    pypi.fetch_wheels(tmp_path / "cache", wanted, index_url=source, pip_args=["--isolated"])
    assert sha256(cached) == wanted[0].sha256


def test_a_wheel_that_does_not_match_its_pin_is_refused(index: Path, tmp_path: Path, wheels: dict[str, Path]):
    source = (index / "pypi/simple").as_uri() + "/"
    wrong = [_wheel(wheels, "tiny-emoji", "1.0", digest="0" * 64)]
    with pytest.raises(SandboxError) as info:
        pypi.fetch_wheels(tmp_path / "cache", wrong, index_url=source, pip_args=["--isolated"])
    assert str(info.value).startswith("downloading the sandbox's PyPI wheels failed: tiny-emoji==1.0: the downloaded "
                                      "file does not match its --hash")
    assert not list((tmp_path / "cache/pypi-wheels").glob("*.whl"))
    with pytest.raises(SandboxError, match=r"tiny-emoji==7.0: no such version \(the index has: 1.0, 1.1\)"):
        pypi.fetch_wheels(tmp_path / "cache", [pypi.Wheel("tiny-emoji", "7.0", "tiny_emoji-7.0-py3-none-any.whl",
                                                          "0" * 64)], index_url=source, pip_args=["--isolated"])


def test_the_pinned_wheels_are_pure_python_and_absent_from_the_sandbox_image():
    for w in pypi.WHEELS:
        assert w.filename.startswith(f"{w.name.replace('-', '_')}-{w.version}-") and w.filename.endswith("-none-any.whl")
        assert re.fullmatch(r"[0-9a-f]{64}", w.sha256)
        assert not any(w.name in pkg for pkg in image.BASE_INCLUDE)  # Debian's python3-numpy and libraries only
    assert "emoji==2.14.0" in [w.pin for w in pypi.WHEELS]
    lines = pypi.requirement_lines()
    assert pyreqs.parse(lines).hashed and not pyreqs.parse(pypi.requirement_lines(hashes=False)).hashed


# ------------------------------------------------------------------------------------- sandbox up, its URL


def test_sandbox_up_builds_the_index_with_the_other_supplies(tmp_path: Path, monkeypatch):
    from tritonfleet.sandbox import aptrepo, dcgmimage

    calls: list[tuple] = []
    monkeypatch.setattr(layout, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(aptrepo, "build_all", lambda root, cache, *_a, **_k: calls.append(("repos", root)) or {})
    monkeypatch.setattr(pypi, "ensure_index", lambda root, cache: calls.append(("pypi", root, cache)) or {"x": 1})
    monkeypatch.setattr(image, "build_triton_image", lambda _cache, out, **_k: out)
    monkeypatch.setattr(dcgmimage, "build_dcgm_image", lambda *_a, **_k: None)
    supplies = services.ensure_supplies(tmp_path / "base")
    assert calls == [("repos", tmp_path / "serve"), ("pypi", tmp_path / "serve", tmp_path / "repo-cache")]
    assert supplies["pypi"] == {"x": 1}


def test_the_index_url_is_on_the_repository_service():
    assert layout.pypi_index_url() == f"http://{layout.BRIDGE_IP}:{layout.REPO_PORT}/pypi/simple/"
    assert layout.pypi_index_url() == "http://192.168.250.1:8080/pypi/simple/"
    assert pyreqs.trusted_host(layout.pypi_index_url()) == "192.168.250.1:8080"  # plain HTTP off loopback


# ---------------------------------------------------------------------------------------- the sample


def test_the_emoji_echo_sample_is_available_but_not_seeded():
    sample = layout.EXTRA_SAMPLES / "emoji_echo"
    config = (sample / "config.pbtxt").read_text()
    assert re.search(r'^name: "emoji_echo"$', config, re.M) and re.search(r'^backend: "python"$', config, re.M)
    (model_file,) = re.findall(r'^default_model_filename: "([^"]+)"$', config, re.M)
    source = (sample / "1" / model_file).read_text()
    tree = ast.parse(source)
    top_imports = [a.name for node in tree.body if isinstance(node, ast.Import) for a in node.names]
    assert "emoji" in top_imports  # at module level: a load without it fails with "No module named 'emoji'"
    assert "class TritonPythonModel" in source
    assert not (layout.SAMPLES / "emoji_echo").exists()  # seed_s3 uploads SAMPLES whole
    assert layout.EXTRA_SAMPLES.resolve() not in layout.SAMPLES.resolve().parents
    assert os.path.commonpath([layout.SAMPLES, layout.EXTRA_SAMPLES]) == str(layout.SAMPLES.parent)
