"""Live reload by `tritonfleet-agent sync --server`: against moto on loopback and a Triton stand-in that
reads the model files through ``DIR/current`` when asked to load, keeps the loaded version when a load
fails (as Triton does) and records every call. (The real Triton does the same in tests/e2e/test_07_models.)"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.stubhttp import QuietHandler, serve
from tests.unit.test_agent_sync import (  # noqa: F401 (endpoint, s3, bucket: fixtures)
    agent,
    bucket,
    endpoint,
    s3,
    set_remote,
    sync_args,
)
from tritonfleet.agent import live

SECRET = "s3cr3t-value-for-the-header-0123"
V1 = {"steady/config.pbtxt": b"steady", "steady/1/model.py": b"one",
      "changing/config.pbtxt": b"changing", "changing/1/model.py": b"v1",
      "leaving/config.pbtxt": b"leaving", "leaving/1/model.py": b"bye"}
V2 = {**{k: v for k, v in V1.items() if not k.startswith("leaving/")},
      "changing/1/model.py": b"v2", "arriving/config.pbtxt": b"arriving", "arriving/1/model.py": b"hi"}


class FakeTriton:
    """``/v2/health/ready`` and the repository API; a load reads ``<repo>/<model>/1/model.py``."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.loaded: dict[str, bytes] = {}
        self.calls: list[tuple[str, str | None]] = []  # (path, header value)
        outer = self

        class Handler(QuietHandler):
            def _reply(self, code: int, body: dict | None = None) -> None:
                super()._reply(code, json.dumps(body or {}).encode())

            def do_GET(self):  # noqa: N802
                self._reply(200 if self.path == "/v2/health/ready" else 404)

            def do_POST(self):  # noqa: N802
                outer.calls.append((self.path, self.headers.get("x-key")))
                if self.headers.get("x-key") != SECRET:
                    return self._reply(403, {"error": "This API is restricted"})
                parts = self.path.strip("/").split("/")  # v2 repository models <m> load|unload
                model, action = parts[3], parts[4]
                if action == "unload":
                    outer.loaded.pop(model, None)
                    return self._reply(200)
                try:
                    data = (outer.repo / model / "1" / "model.py").read_bytes()
                except OSError:
                    return self._reply(400, {"error": f"failed to load '{model}', no version is available"})
                if b"broken" in data:
                    return self._reply(400, {"error": f"load failed for model '{model}': SyntaxError in model.py"})
                outer.loaded[model] = data
                self._reply(200)

        self.server, self.url = serve(Handler)

    def loads(self) -> list[str]:
        return sorted(p.split("/")[4] + ":" + p.split("/")[5] for p, _ in self.calls)


@pytest.fixture
def setup(endpoint, s3, bucket, tmp_path, capsys):  # noqa: F811
    dest = tmp_path / "models"
    header = tmp_path / "header"
    header.write_text(f"x-key: {SECRET}\n")
    header.chmod(0o600)
    triton = FakeTriton(dest / "current")
    set_remote(s3, bucket, "repo", V1)
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, dest))
    assert code == 0, err
    triton.loaded = {m: V1[f"{m}/1/model.py"] for m in ("steady", "changing", "leaving")}  # started on v1

    def run(*extra: str):
        return agent(capsys, *sync_args(endpoint, bucket, dest, "--server", f"triton={triton.url}",
                                        "--header-file", str(header), "--timeout", "5", *extra))
    return dest, triton, run, (s3, bucket), out["version"]


def update_to_v2(setup, actions) -> tuple[dict, str]:
    """Sync V2 with the servers of ``setup`` (either transport's stand-in): the changed and the added model
    load, the removed one unloads, the unchanged one is not touched. ``actions()``: the calls, sorted."""
    dest, triton, run, (client, name), v1 = setup
    set_remote(client, name, "repo", V2)
    code, out, err = run()
    assert code == 0, err
    assert actions() == ["arriving:load", "changing:load", "leaving:unload"]
    assert triton.loaded == {"steady": b"one", "changing": b"v2", "arriving": b"hi"}
    assert out["reload"]["loaded"] == ["arriving", "changing"] and out["reload"]["unloaded"] == ["leaving"]
    assert SECRET not in json.dumps(out) + err
    return out, err


def test_changed_and_added_models_load_removed_unload_unchanged_untouched(setup):
    dest, triton, run, (client, name), v1 = setup
    out, err = update_to_v2(setup, triton.loads)
    assert {h for _, h in triton.calls} == {SECRET}
    assert out["version"] != v1 and os.readlink(dest / "current").endswith(out["version"])
    assert not (dest / live.PENDING).exists()
    assert SECRET not in json.dumps(out) + err

    code, out, err = run()  # nothing new: no call at all
    assert code == 0 and out["status"] == "unchanged" and len(triton.calls) == 3


def test_a_model_that_fails_to_load_switches_back_and_the_old_version_keeps_serving(setup):
    dest, triton, run, (client, name), v1 = setup
    set_remote(client, name, "repo", {**V2, "changing/1/model.py": b"broken v3"})
    code, out, err = run()
    assert code == 1
    assert "model changing did not load (HTTP 400: load failed for model 'changing': SyntaxError in model.py)" \
        in err
    assert os.readlink(dest / "current") == f"versions/{v1}"
    assert out["version"] == v1 and out["reload"]["rolled_back"]
    # what serves is v1 for every model: the added one that loaded is gone again, the removed one stays
    assert triton.loaded == {"steady": b"one", "changing": b"v1", "leaving": b"bye"}

    code, out, err = run()  # still broken in S3: the same refusal, no new download
    assert code == 1 and out["downloaded"] == 0 and "SyntaxError" in err

    set_remote(client, name, "repo", V2)  # fixed
    code, out, err = run()
    assert code == 0, err
    assert triton.loaded == {"steady": b"one", "changing": b"v2", "arriving": b"hi"}


def test_a_reload_owed_by_a_killed_run_is_done_by_the_next(setup):
    dest, triton, run, (client, name), v1 = setup
    set_remote(client, name, "repo", V2)
    code, out, err = run("--dry-run")
    assert code == 0 and out["status"] == "dry-run" and not out["reload"]["pending"], err
    # a run killed right after its switch: current is v2, the pending record still says v1
    code, out, err = run()
    assert code == 0
    v2 = out["version"]
    (dest / live.PENDING).write_text(json.dumps({"served": v1}))
    triton.loaded = {m: V1[f"{m}/1/model.py"] for m in ("steady", "changing", "leaving")}
    triton.calls.clear()
    code, out, err = run("--dry-run")
    assert code == 0 and out["reload"]["pending"] and triton.calls == []
    code, out, err = run()
    assert code == 0 and out["status"] == "unchanged" and out["version"] == v2, err
    assert triton.loaded == {"steady": b"one", "changing": b"v2", "arriving": b"hi"}
    assert not (dest / live.PENDING).exists()


def test_a_server_that_is_not_running_is_skipped(endpoint, s3, bucket, tmp_path, capsys):  # noqa: F811 (fixtures)
    set_remote(s3, bucket, "repo", V1)
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, tmp_path / "m"))
    set_remote(s3, bucket, "repo", V2)
    code, out, err = agent(capsys, *sync_args(endpoint, bucket, tmp_path / "m", "--server", "down=http://127.0.0.1:9"))
    assert code == 0, err
    assert out["reload"]["skipped"] == ["down"] and out["status"] == "synced"


def test_a_header_file_others_can_read_is_refused_and_nothing_switches(setup, tmp_path):
    dest, triton, run, (client, name), v1 = setup
    (tmp_path / "header").chmod(0o644)
    set_remote(client, name, "repo", V2)
    code, out, err = run()
    assert code == 1 and "readable by others" in err and SECRET not in err
    assert os.readlink(dest / "current") == f"versions/{v1}" and triton.calls == []


def test_read_header_needs_a_name_and_a_value(tmp_path):
    f = tmp_path / "h"
    for text in ("", "novalue:", ": x", "no colon"):
        f.write_text(text)
        f.chmod(0o600)
        with pytest.raises(live.SyncError, match="expected one line"):
            live.read_header(str(f))
    f.write_text("x-key: a:b\n")
    assert live.read_header(str(f)) == ("x-key", "a:b")


def test_switching_back_to_a_kept_version_reloads_what_differs(setup):
    dest, triton, run, (client, name), v1 = setup
    set_remote(client, name, "repo", V2)
    code, out, err = run()
    assert code == 0, err
    server = live.Server("triton", triton.url)
    header = live.read_header(str(dest.parent / "header"))
    before, outcome = live.switch_to(str(dest), v1, live.Live([server], header, 5))
    assert before == out["version"] and os.readlink(dest / "current") == f"versions/{v1}"
    assert triton.loaded == {"steady": b"one", "changing": b"v1", "leaving": b"bye"}
    assert outcome.loaded == ["changing", "leaving"] and outcome.unloaded == ["arriving"]
    with pytest.raises(live.SyncError, match="no complete version 000099"):
        live.switch_to(str(dest), "000099-20260101T000000Z", None)


def test_switch_command_line_goes_back_and_names_a_missing_version(setup, capsys):
    dest, triton, run, (client, name), v1 = setup
    set_remote(client, name, "repo", V2)
    code, out, err = run()
    assert code == 0, err
    code, text, err = agent(capsys, "switch", "--dest", str(dest), "--to", v1, "--server", f"triton={triton.url}",
                            "--header-file", str(dest.parent / "header"), "--timeout", "5")
    assert code == 0 and f"-> {v1}; reloaded 2, unloaded 1" in text, err
    assert triton.loaded["changing"] == b"v1"
    code, text, err = agent(capsys, "switch", "--dest", str(dest), "--to", "000042-20260101T000000Z")
    assert code == 1 and "no complete version 000042-20260101T000000Z" in err and "\n" not in err.strip()


# --- what the real Triton needs of a switch back (tests/genmodel/test_live_reload_triton.py shows why) ---------

OLD = 1_000_000_000  # 2001: older than anything a sync writes


def calls(triton: FakeTriton) -> list[str]:
    """The repository calls in the order the server got them, as "model:action"."""
    return [p.split("/")[4] + ":" + p.split("/")[5] for p, _ in triton.calls]


def age(version_dir: Path, *models: str) -> None:
    for m in models:
        os.utime(version_dir / m, (OLD, OLD))


def mtime(version_dir: Path, model: str) -> float:
    return (version_dir / model).stat().st_mtime


def test_switching_back_unloads_each_changed_model_right_before_loading_it(setup):
    """A plain load could leave the newer files serving: a changed model is unloaded, then loaded; an added
    one is only loaded, a removed one only unloaded; the directories switched to are touched."""
    dest, triton, run, (client, name), v1 = setup
    set_remote(client, name, "repo", V2)
    code, out, err = run()
    assert code == 0, err
    age(dest / "versions" / v1, "steady", "changing", "leaving")
    triton.calls.clear()
    server = live.Server("triton", triton.url)
    live.switch_to(str(dest), v1, live.Live([server], live.read_header(str(dest.parent / "header")), 5))
    assert calls(triton) == ["leaving:load", "changing:unload", "changing:load", "arriving:unload"]
    assert triton.loaded == {"steady": b"one", "changing": b"v1", "leaving": b"bye"}
    back = dest / "versions" / v1
    assert mtime(back, "changing") > OLD and mtime(back, "leaving") > OLD  # what is loaded is newer than Triton's
    assert mtime(back, "steady") == OLD  # unchanged: not touched


def test_a_sync_back_to_a_kept_version_touches_the_changed_models_directories_there(setup):
    """The bucket goes back to v1's content: ``current`` is switched back to v1 on disk, whose files are
    older than what the server loaded; the directories of the models to load are touched first."""
    dest, triton, run, (client, name), v1 = setup
    set_remote(client, name, "repo", V2)
    code, out, err = run()
    assert code == 0, err
    v2 = out["version"]
    age(dest / "versions" / v1, "steady", "changing", "leaving")
    age(dest / "versions" / v2, "steady", "changing", "arriving")
    set_remote(client, name, "repo", V1)
    before = time.time() - 1
    code, out, err = run()
    assert (code, out["status"], out["version"]) == (0, "switched", v1), err
    assert out["reload"]["loaded"] == ["changing", "leaving"] and out["reload"]["unloaded"] == ["arriving"]
    back = dest / "versions" / v1
    assert mtime(back, "changing") >= before and mtime(back, "leaving") >= before
    assert mtime(back, "steady") == OLD
    assert all(mtime(dest / "versions" / v2, m) == OLD for m in ("steady", "changing", "arriving"))  # not v2's


def test_a_failed_load_unloads_the_models_that_had_loaded_then_loads_them_from_the_served_version(setup):
    """``changing`` loads v3, ``steady`` does not: back on v1, the added model is unloaded, the one that had
    loaded is unloaded and loaded again, the failed one loaded; v1's directories of those are touched."""
    dest, triton, run, (client, name), v1 = setup
    age(dest / "versions" / v1, "steady", "changing", "leaving")
    set_remote(client, name, "repo", {**V2, "steady/1/model.py": b"broken"})
    code, out, err = run()
    assert code == 1 and "model steady did not load" in err and out["reload"]["rolled_back"]
    assert calls(triton) == ["arriving:load", "changing:load", "steady:load",  # forward: steady fails
                             "arriving:unload", "changing:unload", "changing:load", "steady:load"]
    assert triton.loaded == {"steady": b"one", "changing": b"v1", "leaving": b"bye"}
    back = dest / "versions" / v1
    assert os.readlink(dest / "current") == f"versions/{v1}"
    assert mtime(back, "changing") > OLD and mtime(back, "steady") > OLD
    assert mtime(back, "leaving") == OLD  # removed by v3, so never unloaded: nothing to reload


# --- the header file -------------------------------------------------------------------------------------------

LOOSE = [0o664, 0o646, 0o666, 0o777, 0o644, 0o640, 0o604, 0o660, 0o606, 0o620, 0o602, 0o610, 0o601, 0o700 | 0o044]


@pytest.mark.parametrize("mode", LOOSE, ids=oct)
def test_a_header_file_with_any_group_or_other_permission_is_refused(tmp_path, mode):
    f = tmp_path / "h"
    f.write_text(f"x-key: {SECRET}\n")
    f.chmod(mode)
    with pytest.raises(live.SyncError, match=f"readable by others \\(mode {mode:o}\\); chmod 600") as exc:
        live.read_header(str(f))
    assert SECRET not in str(exc.value)


@pytest.mark.parametrize("mode", [0o600, 0o400], ids=oct)
def test_a_header_file_only_its_owner_can_read_is_accepted(tmp_path, mode):
    f = tmp_path / "h"
    f.write_text(f"x-key: {SECRET}\n")
    f.chmod(mode)
    assert live.read_header(str(f)) == ("x-key", SECRET)


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666, 0o777], ids=oct)
def test_switch_refuses_a_loose_header_file_before_switching_or_calling(setup, capsys, mode):
    dest, triton, run, (client, name), v1 = setup
    set_remote(client, name, "repo", V2)
    code, out, err = run()
    assert code == 0, err
    v2, header = out["version"], dest.parent / "header"
    header.chmod(mode)
    triton.calls.clear()
    code, text, err = agent(capsys, "switch", "--dest", str(dest), "--to", v1, "--server", f"triton={triton.url}",
                            "--header-file", str(header), "--timeout", "5")
    assert code == 1 and "readable by others" in err and SECRET not in err + text
    assert os.readlink(dest / "current") == f"versions/{v2}" and triton.calls == []
    set_remote(client, name, "repo", V1)
    code, out, err = run()  # sync refuses it too
    assert code == 1 and "readable by others" in err and os.readlink(dest / "current") == f"versions/{v2}"
