"""The sandbox cache's prefetch (tritonfleet/sandbox/prefetch.py) and the build locks it shares with the ``up``:
the two slow builds run side by side, a second builder waits and finds the item built, and the prefetch runs on the
system's python3 before the venv exists."""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from tritonfleet.sandbox import baseimage, image, layout, prefetch

ROOT = Path(__file__).resolve().parents[2]


def _rootfs_tar(path: Path) -> Path:
    with tarfile.open(path, "w") as tar:
        for name in (".", "./etc"):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(ti)
    return path


def _twice_at_once(fn, timeout: float = 30) -> list:
    """``fn()`` in two threads, the second started while the first runs; their results, in the order they ended."""
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(fn())) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join(timeout)
    return results


def test_two_builders_of_one_base_layer_build_it_once_and_get_the_same_file(tmp_path, monkeypatch):
    """The second waits on the first's lock, then finds the layer built (no second mmdebstrap run)."""
    base_tar = _rootfs_tar(tmp_path / "rootfs.tar")
    cache = tmp_path / "cache"
    builds: list[float] = []
    real = image._build_base_layer

    def slow_build(*args, **kw):
        builds.append(time.monotonic())
        time.sleep(0.4)  # long enough for the other thread to come in meanwhile
        return real(*args, **kw)

    monkeypatch.setattr(image, "_build_base_layer", slow_build)
    results = _twice_at_once(lambda: image.base_layer(cache, base_tar))
    assert len(builds) == 1, f"built {len(builds)} times"
    assert len(results) == 2 and results[0] == results[1]
    assert results[0][0].is_file()


def test_a_second_base_image_builder_waits_then_finds_it_built(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(layout, "STATE_DIR", tmp_path / "state")
    builds: list[str] = []

    def fake_build(cache, base, digest, keep):
        builds.append(digest)
        time.sleep(0.4)
        base.mkdir(parents=True)
        (base / ".complete").write_text(digest)
        return base

    monkeypatch.setattr(baseimage, "_build_base", fake_build)
    results = _twice_at_once(baseimage.ensure_base)
    assert builds == [baseimage.base_recipe_hash()]
    assert results == [layout.CACHE_DIR / f"base-{baseimage.base_recipe_hash()}"] * 2
    # the waiter said what it waited for, in the state's log directory
    assert (tmp_path / "state" / "logs").is_dir()


def test_prefetch_builds_the_base_image_and_the_base_layer_side_by_side(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "CACHE_DIR", tmp_path / "cache")
    spans: dict[str, tuple[float, float]] = {}

    def timed(name, result):
        def build(*args, **kw):
            t0 = time.monotonic()
            time.sleep(0.5)
            spans[name] = (t0, time.monotonic())
            return result
        return build

    monkeypatch.setattr(prefetch, "ensure_base", timed("base", tmp_path / "base-x"))
    monkeypatch.setattr(image, "base_layer", timed("layer", (tmp_path / "layer.tar", "0" * 64)))
    assert prefetch.prefetch() == tmp_path / "base-x"
    assert set(spans) == {"base", "layer"}
    (b0, b1), (l0, l1) = spans["base"], spans["layer"]
    assert b0 < l1 and l0 < b1, "the two builds did not overlap"


@pytest.mark.parametrize("failing", ["base", "layer"])
def test_a_failed_build_is_raised_after_both_ended(tmp_path, monkeypatch, failing):
    monkeypatch.setattr(layout, "CACHE_DIR", tmp_path / "cache")
    ended: list[str] = []

    def build(name, result):
        def run(*args, **kw):
            time.sleep(0.2 if name == "layer" else 0.05)
            ended.append(name)
            if name == failing:
                raise RuntimeError(f"mmdebstrap failed building the {name}")
            return result
        return run

    monkeypatch.setattr(prefetch, "ensure_base", build("base", tmp_path / "base-x"))
    monkeypatch.setattr(image, "base_layer", build("layer", (tmp_path / "layer.tar", "0" * 64)))
    with pytest.raises(RuntimeError, match=f"building the {failing}"):
        prefetch.prefetch()
    assert sorted(ended) == ["base", "layer"]


def test_the_prefetch_imports_on_a_python_without_the_venv():
    """`make test` starts it with the system's python3 before pip has installed anything: the module and what it
    imports must be standard library (``-S``: not even the system's site-packages)."""
    proc = subprocess.run(["python3", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                           "import tritonfleet.sandbox.prefetch", str(ROOT)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_make_test_starts_the_prefetch_before_pip_installs_the_venv():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("test", "demo"):
        deps = re.search(rf"^{target}:([^#\n]*)", makefile, re.M).group(1).split()
        assert "sandbox-prefetch" in deps and deps.index("sandbox-prefetch") < deps.index("setup-triton"), deps
    recipe = re.search(r"^sandbox-prefetch:.*\n\t(.*)", makefile, re.M).group(1)
    assert "$(PYTHON) -m tritonfleet.sandbox.prefetch --background" in recipe
    # the wheelhouses, with the venv's Python, before pytest or the demo's `up`
    for target, then in (("test", "pytest -n"), ("demo", "sandbox up")):
        body = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
        assert body.index("$(PY) -m tritonfleet.sandbox.prefetch --wheels --background") < body.index(then), body


def test_the_wheels_prefetch_builds_the_wheelhouses_and_host_wheels_the_sandbox_asks_for(monkeypatch):
    from tritonfleet import wheelhouse
    from tritonfleet.sandbox import pypi

    asked: list = []
    monkeypatch.setattr(wheelhouse, "build", lambda qa_for=None: asked.append(qa_for))
    monkeypatch.setattr(pypi, "fetch_host_wheels", lambda cache, project: asked.append((cache, project)))
    prefetch.prefetch_wheels()
    assert asked == [None, (pypi.HOST_PYTHON, os.uname().machine), (layout.CACHE_DIR / "repo-cache", ROOT)]
    # the same place boot_host takes them from
    from tritonfleet.sandbox import fleet
    assert fleet.PROJECT == ROOT


def test_two_fetchers_of_the_host_wheels_download_them_once(tmp_path, monkeypatch):
    """The prefetch and a boot_host at the same time: the second waits for the first's download, then uses it."""
    from tritonfleet.sandbox import pypi

    downloads: list[str] = []

    def slow_download(top, out, key, *rest):
        downloads.append(key)
        time.sleep(0.4)
        out.mkdir(parents=True)
        (out / "pip-1-py3-none-any.whl").write_bytes(b"")
        (out / ".complete").write_text(key + "\n")

    monkeypatch.setattr(pypi, "_download_host_wheels", slow_download)
    got = _twice_at_once(lambda: pypi.fetch_host_wheels(tmp_path, ROOT))
    assert len(downloads) == 1
    assert len(got) == 2 and got[0] == got[1] and [p.name for p in got[0]] == ["pip-1-py3-none-any.whl"]


def test_a_failed_prefetch_is_one_line_and_exit_1_and_non_root_builds_nothing(tmp_path, monkeypatch, capsys):
    """The background build's failure is one line in its log (the one that needs the item builds it again), never a
    traceback; without root it builds nothing and says so."""
    monkeypatch.setattr(layout, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(os, "geteuid", lambda: 0)

    def broken(keep=()):
        raise RuntimeError("mmdebstrap failed building the image base:\nE: no network")

    monkeypatch.setattr(prefetch, "prefetch", broken)
    assert prefetch.main([]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == ("sandbox: prefetch: the base image and the image base layer failed after 0s: "
                                    "mmdebstrap failed building the image base: E: no network")
    built: list[str] = []
    monkeypatch.setattr(prefetch, "prefetch", lambda keep=(): built.append("base"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert prefetch.main([]) == 0 and built == []
    assert "not root, nothing built" in capsys.readouterr().err
