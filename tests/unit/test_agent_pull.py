"""``tritonfleet-agent pull`` (pull.py) against a real moto S3 server on loopback: the pointer read with
conditional requests (requests counted as botocore sends them), back-off bounds, a pointer to a missing,
empty or broken release, group pointers, the state and textfile it leaves, and ``--once`` on the command line."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from tests.unit.test_agent_sync import AWS_ENV, endpoint  # noqa: F401  (the moto server fixture)
from tritonfleet.agent import cli, pull
from tritonfleet.agent.sync import Options

pytestmark = pytest.mark.pure

CONFIG = 'name: "m"\nbackend: "python"\n'


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def s3(endpoint):  # noqa: F811
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture
def bucket(s3):
    name = f"pull-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def put_release(s3, bucket: str, name: str, text: str = "1") -> None:
    s3.put_object(Bucket=bucket, Key=f"root/{name}/m/config.pbtxt", Body=CONFIG.encode())
    s3.put_object(Bucket=bucket, Key=f"root/{name}/m/1/model.py", Body=f"# release {name} {text}\n".encode())


def point(s3, bucket: str, release: str, group: str | None = None) -> None:
    s3.put_object(Bucket=bucket, Key=f"root/RELEASE{'.' + group if group else ''}", Body=f"{release}\n".encode())


def served(dest) -> str:
    return (dest / "current" / "m" / "1" / "model.py").read_text()


def watcher(endpoint, bucket, tmp_path, clock=None, group=None, interval=2.0, max_backoff=60.0):  # noqa: F811
    import boto3

    opts = Options(bucket=bucket, prefix="root/", dest=str(tmp_path / "models"), endpoint_url=endpoint,
                   region="us-east-1", durable=False, lock_wait=1)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    sent: list[str] = []
    client.meta.events.register("before-send.s3", lambda request, **kw: sent.append(request.url))
    w = pull.Watcher(opts, group=group, state_path=str(tmp_path / "state.json"), textfile_dir=str(tmp_path),
                     interval=interval, max_backoff=max_backoff, clock=clock or Clock(), client=client)
    return w, sent


# -- the pointer ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body, release", [
    (b"v2\n", "v2"),
    (b"\n  v2  \n# released by someone\n", "v2"),
    (b"releases/2026-11-27\n", "releases/2026-11-27"),
    (b"s3://bkt/root/v3\n", "v3"),
    (b"s3://bkt/root/v3/\n", "v3"),
    (b"v3/", "v3"),
])
def test_a_pointer_names_a_release_below_the_root(body, release):
    assert pull.parse_pointer(body, "bkt", "root/") == release


@pytest.mark.parametrize("body, words", [
    (b"", "empty"),
    (b"\n \n", "empty"),
    (b"s3://other/root/v2", "not below the release root"),
    (b"s3://bkt/rootx/v2", "not below the release root"),
    (b"s3://bkt/root/", "not below the release root"),
    (b"../v2", "expected a release"),
    (b"a//b", "expected a release"),
    (b"/v2", "expected a release"),
    (b"/v2/", "expected a release"),
    (b"v2 v3", "expected a release"),
    (b"RELEASE.canary", "is a pointer"),
    (b"\xff\xfe", "not UTF-8"),
    (b"v" * 2000, "at most 1024"),
])
def test_a_pointer_that_names_no_release_is_refused_in_one_line(body, words):
    with pytest.raises(pull.PointerError) as e:
        pull.parse_pointer(body, "bkt", "root/")
    assert words in str(e.value) and "\n" not in str(e.value)


def test_backoff_doubles_from_the_interval_and_never_passes_its_bound():
    got = [pull.backoff(n, 2.0, 60.0) for n in range(0, 9)]
    assert got == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0, 60.0]
    assert pull.backoff(10_000, 2.0, 60.0) == 60.0
    assert pull.backoff(1, 5.0, 3.0) == 5.0  # never under the interval


# -- the loop against S3 ----------------------------------------------------------------------------------------

def test_a_release_is_synced_then_an_unchanged_pointer_costs_one_conditional_request(endpoint, s3, bucket, tmp_path):  # noqa: F811
    put_release(s3, bucket, "v1")
    point(s3, bucket, "v1")
    w, sent = watcher(endpoint, bucket, tmp_path)
    first = w.check()
    assert first.action == "synced" and first.error is None
    assert "release v1" in served(tmp_path / "models")
    assert w.state.release == w.state.pointed == "v1" and w.state.last_change is not None
    assert w.state.source == f"s3://{bucket}/root/v1/"
    sent.clear()
    again = w.check()
    assert again.action == "none" and again.requests == 1 and again.changed is False
    assert len(sent) == 1 and sent[0].endswith("/root/RELEASE")


def test_a_new_pointer_switches_the_host_to_that_release(endpoint, s3, bucket, tmp_path):  # noqa: F811
    for v in ("v1", "v2"):
        put_release(s3, bucket, v)
    point(s3, bucket, "v1")
    clock = Clock()
    w, _ = watcher(endpoint, bucket, tmp_path, clock)
    w.check()
    changed_at = w.state.last_change
    clock.t += 10
    point(s3, bucket, "v2")
    check = w.check()
    assert check.changed and check.action == "synced" and check.result.status == "synced"
    assert "release v2" in served(tmp_path / "models")
    assert w.state.release == "v2" and w.state.last_change == changed_at + 10
    # back to v1: already on disk, switched without a download
    point(s3, bucket, "v1")
    back = w.check()
    assert back.result.status == "switched" and back.result.downloaded == 0
    assert "release v1" in served(tmp_path / "models")


def test_a_pointer_to_a_missing_release_keeps_serving_and_backs_off(endpoint, s3, bucket, tmp_path):  # noqa: F811
    put_release(s3, bucket, "v1")
    point(s3, bucket, "v1")
    clock = Clock()
    w, sent = watcher(endpoint, bucket, tmp_path, clock, interval=2.0, max_backoff=60.0)
    w.check()
    point(s3, bucket, "v9")  # nothing below root/v9/
    failed = w.check()
    assert failed.action == "failed" and "release v9" in failed.error
    assert "release v1" in served(tmp_path / "models")
    s = w.state
    assert (s.release, s.pointed, s.failures) == ("v1", "v9", 1)
    assert s.next_check == clock.t + 4.0 and s.last_error == failed.error
    # before the back-off has passed: the pointer only (one 304), no listing
    clock.t += 3
    sent.clear()
    waiting = w.check()
    assert waiting.action == "none" and waiting.requests == 1 and len(sent) == 1
    # once it has: tried again, and the back-off doubles
    clock.t += 1
    retry = w.check()
    assert retry.action == "failed" and w.state.failures == 2 and w.state.next_check == clock.t + 8.0
    # the pointer back at v1, which the host serves: all is well at once, nothing to sync
    point(s3, bucket, "v1")
    fixed = w.check()
    assert fixed.action == "none" and fixed.result is None and w.state.failures == 0 and w.state.last_error is None
    # a release that failed, then fixed under the same name, is synced at its next try
    point(s3, bucket, "v9")
    assert w.check().action == "failed"
    put_release(s3, bucket, "v9")
    clock.t += 4  # the back-off: 4 s after one failure
    assert w.check().action == "synced" and w.state.release == "v9" and w.state.failures == 0


def test_a_short_s3_outage_is_over_as_soon_as_the_pointer_reads_again(endpoint, s3, bucket, tmp_path):  # noqa: F811
    import boto3
    from botocore.config import Config

    put_release(s3, bucket, "v1")
    point(s3, bucket, "v1")
    clock = Clock()
    w, sent = watcher(endpoint, bucket, tmp_path, clock, interval=1.0, max_backoff=300.0)
    w.check()
    good = w.client
    w.client = boto3.client("s3", endpoint_url="http://127.0.0.1:9", region_name="us-east-1",
                            config=Config(retries={"max_attempts": 1}, connect_timeout=1))
    for _ in range(8):  # S3 out of reach: the pointer requests back off (the host serves on)
        clock.t += 1
        assert w.check().action == "failed"
    assert w.state.failures == 8 and w.state.last_check == clock.t and w.wait() == 256.0
    w.client = good
    sent.clear()
    back = w.check()
    assert back.action == "none" and len(sent) == 1 and w.wait() == 1.0
    assert (w.state.failures, w.state.last_error, w.state.release) == (0, None, "v1")


def test_a_broken_model_in_the_release_fails_without_a_switch(endpoint, s3, bucket, tmp_path):  # noqa: F811
    put_release(s3, bucket, "v1")
    point(s3, bucket, "v1")
    w, _ = watcher(endpoint, bucket, tmp_path)
    w.check()
    version = w.state.version
    # a release whose key cannot be a file path: the sync refuses it before anything changes
    s3.put_object(Bucket=bucket, Key="root/v2/m/1/model.py", Body=b"x")
    s3.put_object(Bucket=bucket, Key="root/v2/m/1/model.py/x", Body=b"x")
    point(s3, bucket, "v2")
    check = w.check()
    assert check.action == "failed" and "both a file and a directory" in check.error
    assert w.state.version == version and w.state.release == "v1" and "release v1" in served(tmp_path / "models")


def test_a_pointer_with_a_bad_body_is_reported_and_nothing_is_synced(endpoint, s3, bucket, tmp_path):  # noqa: F811
    put_release(s3, bucket, "v1")
    point(s3, bucket, "v1")
    w, sent = watcher(endpoint, bucket, tmp_path)
    w.check()
    point(s3, bucket, "../etc")
    sent.clear()
    check = w.check()
    assert check.action == "failed" and "RELEASE: the pointer names '../etc'" in check.error
    assert len(sent) == 1 and w.state.release == "v1" and w.state.pointed is None


def test_no_pointer_yet_says_how_to_release_one(endpoint, s3, bucket, tmp_path):  # noqa: F811
    w, _ = watcher(endpoint, bucket, tmp_path)
    check = w.check()
    assert check.action == "no-release" and "tritonfleet models release" in check.error
    assert w.state.failures == 0 and w.state.release is None


def test_a_group_follows_its_pointer_while_it_exists_then_the_fleets(endpoint, s3, bucket, tmp_path):  # noqa: F811
    for v in ("v1", "v2"):
        put_release(s3, bucket, v)
    point(s3, bucket, "v1")
    point(s3, bucket, "v2", group="canary")
    w, sent = watcher(endpoint, bucket, tmp_path, group="canary")
    w.check()
    assert w.state.release == "v2" and w.state.pointer == "RELEASE.canary"
    sent.clear()
    assert w.check().requests == 1 and len(sent) == 1 and sent[0].endswith("RELEASE.canary")
    s3.delete_object(Bucket=bucket, Key="root/RELEASE.canary")
    back = w.check()
    assert back.changed and back.requests == 2 and w.state.release == "v1" and w.state.pointer == "RELEASE"
    other, _ = watcher(endpoint, bucket, tmp_path / "other", group="blue")
    (tmp_path / "other").mkdir()
    other.check()
    assert other.state.release == "v1"


def test_an_unreachable_s3_is_a_failure_not_a_crash(tmp_path):
    import boto3
    from botocore.config import Config

    opts = Options(bucket="b", prefix="root/", dest=str(tmp_path / "models"), endpoint_url="http://127.0.0.1:9",
                   region="us-east-1", durable=False)
    client = boto3.client("s3", endpoint_url="http://127.0.0.1:9", region_name="us-east-1",
                          aws_access_key_id="x", aws_secret_access_key="x",
                          config=Config(retries={"max_attempts": 1}, connect_timeout=1))
    w = pull.Watcher(opts, client=client, clock=Clock(), interval=1, max_backoff=8)
    check = w.check()
    assert check.action == "failed" and check.error.startswith("reading the release pointer")
    assert w.state.failures == 1 and w.state.next_check == Clock()() + 2


def test_the_state_file_and_the_textfile_say_what_is_served(endpoint, s3, bucket, tmp_path):  # noqa: F811
    put_release(s3, bucket, "v1")
    point(s3, bucket, "v1")
    w, _ = watcher(endpoint, bucket, tmp_path)
    w.check()
    point(s3, bucket, "v7")
    w.check()
    state = json.loads((tmp_path / "state.json").read_text())
    assert (state["release"], state["pointed"], state["failures"]) == ("v1", "v7", 1)
    assert state["pid"] == os.getpid() and oct(os.stat(tmp_path / "state.json").st_mode & 0o777) == "0o644"
    text = (tmp_path / pull.TEXTFILE).read_text()
    assert 'tritonfleet_models_release_info{release="v1",pointer="RELEASE"} 1' in text
    assert 'tritonfleet_models_release_pointed_info{release="v7"} 1' in text
    assert "tritonfleet_models_release_behind 1" in text and "tritonfleet_models_release_failures 1" in text


def test_metrics_text_escapes_labels_and_is_not_behind_when_served():
    s = pull.State(release='a"b', pointed='a"b', pointer="RELEASE", last_check=5.0)
    text = pull.metrics_text(s)
    assert 'release="a\\"b"' in text and "tritonfleet_models_release_behind 0" in text
    assert "tritonfleet_models_release_last_check_timestamp_seconds 5.000" in text


def test_a_restarted_agent_picks_up_the_state_and_syncs_once(endpoint, s3, bucket, tmp_path):  # noqa: F811
    put_release(s3, bucket, "v1")
    point(s3, bucket, "v1")
    w, _ = watcher(endpoint, bucket, tmp_path)
    w.check()
    state = pull.State.load(str(tmp_path / "state.json"))
    assert state.release == "v1"
    w2, _ = watcher(endpoint, bucket, tmp_path)
    w2.state = state
    check = w2.check()
    assert check.action == "synced" and check.result.status == "unchanged"
    assert pull.State.load(str(tmp_path / "nonexistent.json")) == pull.State()


# -- the command line ------------------------------------------------------------------------------------------

def test_pull_once_serves_the_pointed_release_and_dry_run_names_it(endpoint, s3, bucket, tmp_path, capsys):  # noqa: F811
    put_release(s3, bucket, "v1")
    point(s3, bucket, "v1")
    base = ["pull", "--once", "--source", f"s3://{bucket}/root", "--dest", str(tmp_path / "m"),
            "--endpoint-url", endpoint, "--region", "us-east-1", "--no-fsync"]
    assert cli.main([*base, "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["status"] == "dry-run" and plan["release"] == "v1" and plan["files"]["added"]
    assert cli.main([*base, "--state", str(tmp_path / "s.json")]) == 0
    assert capsys.readouterr().out.startswith("release v1: synced")
    point(s3, bucket, "v5")
    assert cli.main([*base, "--state", str(tmp_path / "s.json")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tritonfleet-agent: error: release v5:")


def test_pull_refuses_bad_arguments_in_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        cli.main(["pull", "--source", "s3://bkt/root", "--dest", str(tmp_path), "--group", "Bad Group"])
    assert e.value.code == 2 and "--group" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["pull", "--source", "s3://bkt/root", "--dest", str(tmp_path), "--dry-run"])
    assert e.value.code == 2 and "--dry-run goes with --once" in capsys.readouterr().err


def test_one_resident_agent_reloads_after_a_failed_release_with_the_next_one(endpoint, s3, bucket, tmp_path):  # noqa: F811
    """As found on the sandbox: the agent keeps one Live for every sync; a broken release's failed load must not
    fail the next release (each sync judges its own reload)."""
    from tests.unit.test_agent_live import SECRET, FakeTriton
    from tritonfleet.agent.live import Live, Server

    put_release(s3, bucket, "v1")
    s3.put_object(Bucket=bucket, Key="root/v2/m/config.pbtxt", Body=CONFIG.encode())
    s3.put_object(Bucket=bucket, Key="root/v2/m/1/model.py", Body=b"# broken on purpose\n")
    put_release(s3, bucket, "v3")
    point(s3, bucket, "v1")
    triton = FakeTriton(tmp_path / "models" / "current")
    w, _ = watcher(endpoint, bucket, tmp_path)
    w.live = Live([Server("triton", triton.url)], ("x-key", SECRET), 5)
    assert w.check().action == "synced"
    point(s3, bucket, "v2")
    refused = w.check()
    assert refused.action == "failed" and "model m did not load" in refused.error
    assert w.state.release == "v1" and "release v1" in served(tmp_path / "models")
    point(s3, bucket, "v3")
    fixed = w.check()
    assert fixed.action == "synced", fixed.error
    assert w.state.release == "v3" and triton.loaded["m"].startswith(b"# release v3")
