"""Release pointers of pull mode (issue 27, "Releasing"): the names and bodies the host agent reads
(tritonfleet/fleet/release.py) and ``tritonfleet models release|releases`` writing and reading them in S3
(moto's mock_aws, fake keys only)."""

from __future__ import annotations

from datetime import datetime, timezone

import boto3
import pytest
from botocore.exceptions import ClientError
from click.testing import CliRunner
from moto import mock_aws

from tritonfleet.face.cli import main
from tritonfleet.fleet import release as rel
from tritonfleet.fleet.release import ReleaseError

pytestmark = pytest.mark.pure

BUCKET = "models-bucket"
ROOT = f"s3://{BUCKET}/fleet/models"
PREFIX = "fleet/models"
NOW = datetime(2026, 11, 27, 10, 30, 5, tzinfo=timezone.utc)


@pytest.fixture
def s3(monkeypatch):
    """A mocked S3 with the bucket and two releases, v1 and v2 (Triton model repositories), and no pointer."""
    for var in ("AWS_PROFILE", "AWS_CA_BUNDLE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN",
                "TRITONFLEET_REGION", "AWS_REGION", "TRITONFLEET_MODELS_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = rel.client("us-east-1")
        client.create_bucket(Bucket=BUCKET)
        for release in ("v1", "v2"):
            put(client, f"{release}/resnet/config.pbtxt", 'platform: "onnxruntime_onnx"\n')
            put(client, f"{release}/resnet/1/model.onnx", "weights")
        yield client


def put(s3, name: str, body: str) -> None:
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{name}", Body=body.encode())


def body_of(s3, name: str) -> str | None:
    try:
        return s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{name}")["Body"].read().decode()
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "NoSuchKey"
        return None


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text
    return text


# -- names -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("given,expected", [
    ("v2", "v2"), ("v2/", "v2"), ("  v2\n", "v2"), ("releases/2026-11-27", "releases/2026-11-27"),
    ("release/v1", "release/v1"), ("v1.2_rc-3", "v1.2_rc-3"), ("..v2", "..v2"),
    (f"{ROOT}/v2", "v2"), (f"{ROOT}/v2/", "v2"), (f"{ROOT}/releases/2026-11-27/", "releases/2026-11-27"),
])
def test_a_release_is_relative_to_the_root(given, expected):
    assert rel.relative_release(ROOT, given) == expected
    assert rel.relative_release(ROOT + "/", given) == expected  # a root with its trailing slash is the same


@pytest.mark.parametrize("given,why", [
    ("s3://other-bucket/fleet/models/v2", "is not below the release root s3://models-bucket/fleet/models"),
    (f"s3://{BUCKET}/fleet/models-old/v2", "is not below the release root"),  # a sibling prefix, not below
    (f"s3://{BUCKET}/fleet/v2", "is not below the release root"),
    (ROOT, "is not below the release root"), (ROOT + "/", "names no release"),
    ("", "names no release"), ("/v2", "expected a release like v2"), ("../v1", "no empty, . or .. component"),
    ("v1/../v2", "expected a release"), ("./v2", "expected a release"), ("v2//x", "expected a release"),
    ("v 2", "expected a release"), ("v2?x=1", "expected a release"), ("https://b/p/v2", "expected a release"),
    ("RELEASE", "names a pointer"), ("RELEASE.canary", "names a pointer"), ("RELEASEs/v1", "names a pointer"),
    (f"{ROOT}/RELEASE.canary", "names a pointer"),
])
def test_a_release_outside_the_root_or_not_a_name_is_refused_in_one_line(given, why):
    with pytest.raises(ReleaseError) as caught:
        rel.relative_release(ROOT, given)
    assert why in one_line(caught.value)


def test_a_release_outside_the_root_says_what_to_do():
    with pytest.raises(ReleaseError) as caught:
        rel.relative_release(ROOT, "s3://other-bucket/x/v2")
    assert "e.g. v2 or s3://models-bucket/fleet/models/v2" in str(caught.value) and "--root" in str(caught.value)


@pytest.mark.parametrize("uri,expected", [
    ("s3://models-bucket/fleet/models", (BUCKET, PREFIX)), ("s3://models-bucket/fleet/models/", (BUCKET, PREFIX)),
    ("s3://models-bucket", (BUCKET, "")), ("s3://models-bucket/", (BUCKET, "")), ("s3://a.b-c/x", ("a.b-c", "x")),
])
def test_parse_root(uri, expected):
    assert rel.parse_root(uri) == expected


@pytest.mark.parametrize("uri", ["", "models-bucket/p", "s3://", "s3://B/p", "s3://ab", "s3://b-b/a//c",
                                 "s3://b-b/a/../c", "s3://b-b/a b", "https://b-b/p"])
def test_parse_root_refuses_what_is_no_root(uri):
    with pytest.raises(ReleaseError) as caught:
        rel.parse_root(uri)
    assert "expected s3://BUCKET/PREFIX" in one_line(caught.value)


def test_parent_root_of_a_full_release_uri():
    assert rel.parent_root(f"{ROOT}/v2/") == ROOT
    assert rel.parent_root(f"s3://{BUCKET}/v2") == f"s3://{BUCKET}"
    with pytest.raises(ReleaseError):
        rel.parent_root(f"s3://{BUCKET}/")


@pytest.mark.parametrize("good", ["canary", "a", "0", "blue-1_a", "x" * 63])
def test_group_names(good):
    assert rel.validate_group(good) == good
    assert rel.pointer_key(PREFIX, good) == f"{PREFIX}/RELEASE.{good}"


@pytest.mark.parametrize("bad", ["", "Canary", "-a", "_a", "a.b", "a/b", "x" * 64, "a b"])
def test_bad_group_names_are_refused(bad):
    with pytest.raises(ReleaseError) as caught:
        rel.validate_group(bad)
    assert "models_pull_group" in one_line(caught.value)
    with pytest.raises(ReleaseError):
        rel.pointer_key(PREFIX, bad)


def test_pointer_keys():
    assert rel.pointer_key(PREFIX) == "fleet/models/RELEASE"
    assert rel.pointer_key(PREFIX + "/", "canary") == "fleet/models/RELEASE.canary"
    assert rel.pointer_key("") == "RELEASE"
    assert rel.group_of("RELEASE") is None and rel.group_of("RELEASE.canary") == "canary"
    for bad in ("RELEASEx", "RELEASE.", "RELEASE.Bad", "v2"):
        with pytest.raises(ReleaseError):
            rel.group_of(bad)


# -- bodies ---------------------------------------------------------------------------------------------------

def test_pointer_body_is_the_release_then_who_and_when_and_reads_back():
    body = rel.pointer_body("releases/2026-11-27", NOW, "alice@controller")
    assert body == "releases/2026-11-27\n# released 2026-11-27T10:30:05Z by alice@controller\n"
    assert rel.parse_pointer(body) == "releases/2026-11-27"
    assert rel.parse_pointer(body.encode()) == "releases/2026-11-27"
    # naive datetimes are UTC, and so are epoch seconds
    assert rel.pointer_body("v2", NOW.replace(tzinfo=None), "a@b") == rel.pointer_body("v2", NOW.timestamp(), "a@b")


def test_pointer_body_keeps_who_on_one_line_and_within_the_limit():
    body = rel.pointer_body("v2", NOW, "mallory\n@evil\r\nv9")
    assert body.splitlines()[1] == "# released 2026-11-27T10:30:05Z by mallory @evil v9"
    long = rel.pointer_body("v2", NOW, "é" * 2000)
    assert len(long.encode()) <= rel.MAX_BODY and long.endswith("\n") and rel.parse_pointer(long) == "v2"
    with pytest.raises(ReleaseError):
        rel.pointer_body("../v2", NOW, "a@b")
    with pytest.raises(ReleaseError):
        rel.pointer_body("v" * rel.MAX_BODY, NOW, "a@b")


@pytest.mark.parametrize("body,expected", [
    ("v2", "v2"), ("\n\n   v2  \n# anything\nv9\n", "v2"), ("v2/\n", "v2"), (b"releases/a\r\nnote", "releases/a"),
    (f"{ROOT}/v3/\n# by hand\n", "v3"),
])
def test_parse_pointer_reads_the_first_non_blank_line(body, expected):
    assert rel.parse_pointer(body, ROOT) == expected


@pytest.mark.parametrize("body,why", [
    ("", "empty"), ("  \n\n", "empty"), ("# released by alice\nv2\n", "expected a release"),
    ("../v1\n", "expected a release"), ("RELEASE.canary\n", "is a pointer, not a release"),
    ("v2" + " " * 1023, "at most 1024"), (b"\xff\xfe v2\n", "not UTF-8"),
    ("s3://other-bucket/v2\n", "is not below the release root"),
])
def test_parse_pointer_refuses_what_names_no_release(body, why):
    with pytest.raises(ReleaseError) as caught:
        rel.parse_pointer(body, ROOT)
    assert why in one_line(caught.value)


def test_a_full_uri_in_a_pointer_needs_the_root():
    with pytest.raises(ReleaseError) as caught:
        rel.parse_pointer(f"{ROOT}/v2\n")
    assert "full URI" in one_line(caught.value)


# -- releasing in S3 --------------------------------------------------------------------------------------

def test_a_fleet_release_writes_release_then_rewrites_every_group_pointer(s3):
    put(s3, "RELEASE", "v1\n# released 2026-11-01T00:00:00Z by bob@ctl\n")
    put(s3, "RELEASE.canary", "v3\n")
    put(s3, "RELEASE.blue", f"{ROOT}/v1/\n")
    untouched = {"RELEASEx": "v1\n", "RELEASE.Bad": "v1\n", "v2/RELEASE.canary": "x", "RELEASE.canary/x": "y"}
    for name, body in untouched.items():
        put(s3, name, body)
    result = rel.release(s3, ROOT, "v2", now=NOW, who="alice@ctl")
    body = "v2\n# released 2026-11-27T10:30:05Z by alice@ctl\n"
    assert result["body"] == body and result["release"] == "v2" and result["group"] is None
    assert result["written"] == ["RELEASE", "RELEASE.blue", "RELEASE.canary"]  # the fleet's first
    assert {n: body_of(s3, n) for n in result["written"]} == dict.fromkeys(result["written"], body)
    assert {n: body_of(s3, n) for n in untouched} == untouched
    assert result["previous"] == {"RELEASE": "v1\n# released 2026-11-01T00:00:00Z by bob@ctl\n",
                                  "RELEASE.blue": f"{ROOT}/v1/\n", "RELEASE.canary": "v3\n"}
    assert result["was"] == {"RELEASE": "v1", "RELEASE.blue": "v1", "RELEASE.canary": "v3"}
    head = s3.head_object(Bucket=BUCKET, Key=f"{PREFIX}/RELEASE")
    assert head["ContentType"] == "text/plain"
    assert rel.pointers(s3, ROOT) == {"RELEASE": "v2", "RELEASE.blue": "v2", "RELEASE.canary": "v2"}


def test_a_fleet_release_accepts_a_full_uri_and_writes_the_relative_name(s3):
    rel.release(s3, ROOT, f"{ROOT}/v2/", now=NOW, who="a@b")
    assert body_of(s3, "RELEASE").splitlines()[0] == "v2"


def test_a_group_release_writes_only_its_pointer(s3):
    put(s3, "RELEASE", "v1\n")
    put(s3, "RELEASE.blue", "v1\n")
    result = rel.release(s3, ROOT, "v2", "canary", now=NOW, who="a@b")
    assert result["written"] == ["RELEASE.canary"] and result["pointer"] == "RELEASE.canary"
    assert result["previous"] == {"RELEASE.canary": None} and result["was"] == {"RELEASE.canary": None}
    assert body_of(s3, "RELEASE.canary") == result["body"]
    assert body_of(s3, "RELEASE") == "v1\n" and body_of(s3, "RELEASE.blue") == "v1\n"
    assert rel.pointers(s3, ROOT) == {"RELEASE": "v1", "RELEASE.blue": "v1", "RELEASE.canary": "v2"}


def test_rollback_restores_the_bodies_and_deletes_pointers_that_were_not_there(s3):
    put(s3, "RELEASE.canary", "v3\n# by hand\n")
    put(s3, "RELEASE.blue", b"\xff not utf-8\n".decode("latin-1"))
    blue = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/RELEASE.blue")["Body"].read()
    result = rel.release(s3, ROOT, "v2", now=NOW, who="a@b")  # RELEASE did not exist
    assert body_of(s3, "RELEASE") == result["body"]
    assert rel.rollback(s3, ROOT, result) == {"RELEASE.canary": "restored", "RELEASE.blue": "restored",
                                              "RELEASE": "deleted"}
    assert body_of(s3, "RELEASE") is None and body_of(s3, "RELEASE.canary") == "v3\n# by hand\n"
    assert s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/RELEASE.blue")["Body"].read() == blue


def test_rollback_of_a_group_release_deletes_the_new_group_pointer(s3):
    put(s3, "RELEASE", "v1\n")
    result = rel.release(s3, ROOT, "v2", "canary", now=NOW, who="a@b")
    assert rel.rollback(s3, ROOT, result["previous"]) == {"RELEASE.canary": "deleted"}
    assert body_of(s3, "RELEASE.canary") is None and body_of(s3, "RELEASE") == "v1\n"
    put(s3, "RELEASE.canary", "v1\n")
    again = rel.release(s3, ROOT, "v2", "canary", now=NOW, who="a@b")
    rel.rollback(s3, ROOT, again)
    assert body_of(s3, "RELEASE.canary") == "v1\n"


def test_rollback_refuses_a_name_that_is_no_pointer_before_changing_anything(s3):
    put(s3, "RELEASE", "v1\n")
    with pytest.raises(ReleaseError):
        rel.rollback(s3, ROOT, {"RELEASE": "v0\n", "../v1/resnet/config.pbtxt": None})
    assert body_of(s3, "RELEASE") == "v1\n"


@pytest.mark.parametrize("objects,why", [
    ({}, "s3://models-bucket/fleet/models/v9/ holds no objects: upload the repository first"),
    ({"v9/": ""}, "holds no objects"),  # a console's folder marker is no repository
    ({"v90/resnet/config.pbtxt": "x"}, "holds no objects"),  # another release that starts the same
    ({"v9/resnet/1/model.onnx": "w", "v9/bert/config": "x", "v9/bert/config.pbtxt.bak": "x"},
     "holds no <model>/config.pbtxt (none of its 2 directories has one)"),
    ({"v9/config.pbtxt": "x"}, "(it has no model directories)"),
    ({"v9/a/b/config.pbtxt": "x"}, "holds no <model>/config.pbtxt"),  # one level too deep
])
def test_check_refuses_a_release_that_is_no_repository_and_writes_nothing(s3, objects, why):
    for name, body in objects.items():
        put(s3, name, body)
    with pytest.raises(ReleaseError) as caught:
        rel.release(s3, ROOT, "v9", now=NOW, who="a@b")
    assert why in one_line(caught.value)
    assert body_of(s3, "RELEASE") is None
    rel.release(s3, ROOT, "v9", check=False, now=NOW, who="a@b")  # --no-check: written anyway
    assert body_of(s3, "RELEASE").startswith("v9\n")


def test_check_finds_a_config_after_models_without_one(s3):
    for i in range(5):
        put(s3, f"v9/m{i}/1/model.onnx", "w")
    put(s3, "v9/m5/config.pbtxt", "x")
    assert rel.check_release(s3, ROOT, "v9") == f"{ROOT}/v9/"


def test_s3_errors_are_one_line_naming_the_object_and_what_to_do(s3):
    with pytest.raises(ReleaseError) as caught:
        rel.release(s3, "s3://no-such-bucket/p", "v2", check=False)
    assert "s3://no-such-bucket/p/RELEASE: bucket no-such-bucket does not exist" in one_line(caught.value)

    class Denied:
        """An S3 client whose PutObject is denied (and everything else is moto's)."""

        def __getattr__(self, name):
            return getattr(s3, name)

        def put_object(self, **kwargs):
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "PutObject")

    with pytest.raises(ReleaseError) as caught:
        rel.release(Denied(), ROOT, "v2")
    text = one_line(caught.value)
    assert text.startswith(f"{ROOT}/RELEASE: access denied writing it")
    assert "needs s3:PutObject on arn:aws:s3:::models-bucket/fleet/models/RELEASE" in text


def test_a_fleet_release_failing_half_way_says_what_was_written(s3):
    put(s3, "RELEASE", "v1\n")
    put(s3, "RELEASE.canary", "v1\n")

    class FailsOnCanary:
        def __getattr__(self, name):
            return getattr(s3, name)

        def put_object(self, **kwargs):
            if kwargs["Key"].endswith("RELEASE.canary"):
                raise ClientError({"Error": {"Code": "InternalError", "Message": "We encountered an internal "
                                             "error.\nPlease try again."}}, "PutObject")
            return s3.put_object(**kwargs)

    with pytest.raises(ReleaseError) as caught:
        rel.release(FailsOnCanary(), ROOT, "v2", now=NOW, who="a@b")
    assert "RELEASE.canary: writing it failed: InternalError" in one_line(caught.value)
    assert "written before it: RELEASE (run it again to finish)" in str(caught.value)
    assert caught.value.written == ["RELEASE"] and caught.value.previous == {"RELEASE": "v1\n"}
    assert body_of(s3, "RELEASE").startswith("v2\n") and body_of(s3, "RELEASE.canary") == "v1\n"
    rel.rollback(s3, ROOT, caught.value.previous)
    assert body_of(s3, "RELEASE") == "v1\n"


def test_pointers_lists_every_pointer_and_leaves_out_bodies_naming_none(s3, caplog):
    assert rel.pointers(s3, ROOT) == {}
    put(s3, "RELEASE", f"{ROOT}/v2/\n")
    put(s3, "RELEASE.canary", "v3\n# released 2026-11-27T10:30:05Z by alice@ctl\n")
    put(s3, "RELEASE.broken", "../v1\n")
    put(s3, "RELEASEx", "v1\n")
    assert rel.pointers(s3, ROOT) == {"RELEASE": "v2", "RELEASE.canary": "v3"}
    assert "RELEASE.broken" in caplog.text
    found = rel.read_pointers(s3, ROOT)
    assert [p.name for p in found] == ["RELEASE", "RELEASE.broken", "RELEASE.canary"]
    assert found[2].note == "released 2026-11-27T10:30:05Z by alice@ctl" and found[1].error


# -- the command line ----------------------------------------------------------------------------------------

def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, ["models", *args], env=env)


def test_cli_release_prints_what_each_pointer_names_now_and_before(s3):
    put(s3, "RELEASE", "v1\n")
    put(s3, "RELEASE.canary", "v3\n")
    result = run("release", "v2", "--root", ROOT)
    assert result.exit_code == 0, result.output
    assert result.output == "RELEASE -> v2 (was v1)\nRELEASE.canary -> v2 (was v3)\n"
    assert body_of(s3, "RELEASE").startswith("v2\n# released ")
    put(s3, "RELEASE.broken", "../v1\n# by hand\n")
    result = run("release", "v1", "--root", ROOT)
    assert result.output == ("RELEASE -> v1 (was v2)\nRELEASE.broken -> v1 (was invalid: '../v1')\n"
                             "RELEASE.canary -> v1 (was v2)\n")


def test_cli_group_release_and_root_from_the_environment(s3):
    put(s3, "RELEASE", "v1\n")
    result = run("release", "v2", "--group", "canary", env={"TRITONFLEET_MODELS_ROOT": ROOT})
    assert result.exit_code == 0, result.output
    assert result.output == "RELEASE.canary -> v2 (was: following RELEASE)\n"
    result = run("release", "v1", "--group", "canary", env={"TRITONFLEET_MODELS_ROOT": ROOT})
    assert result.output == "RELEASE.canary -> v1 (was v2)\n"
    assert body_of(s3, "RELEASE") == "v1\n"


def test_cli_full_uri_without_root_releases_below_its_parent(s3):
    result = run("release", f"{ROOT}/v2/")
    assert result.exit_code == 0, result.output
    assert result.output == "RELEASE -> v2 (was: no pointer)\n" and body_of(s3, "RELEASE").startswith("v2\n")


@pytest.mark.parametrize("args,why", [
    (["release", "v2"], "no release root: pass --root s3://BUCKET/PREFIX"),
    (["release", "v2", "--root", "models-bucket/p"], "expected s3://BUCKET/PREFIX"),
    (["release", "../v1", "--root", ROOT], "expected a release like v2"),
    (["release", "s3://other-bucket/p/v2", "--root", ROOT], "is not below the release root"),
    (["release", "v2", "--root", ROOT, "--group", "Canary"], "models_pull_group"),
    (["release", "v9", "--root", ROOT], "v9/ holds no objects: upload the repository first"),
    (["release", "v2", "--root", "s3://no-such-bucket/p"], "does not exist"),
    (["releases"], "no release root"),
    (["releases", "--root", "s3://no-such-bucket/p"], "does not exist"),
])
def test_cli_errors_are_one_line(s3, args, why):
    result = run(*args)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and why in lines[0], result.output
    assert body_of(s3, "RELEASE") is None


def test_cli_releases_prints_a_table_of_the_pointers(s3):
    result = run("releases", "--root", ROOT)
    assert result.exit_code == 0 and "no release pointers below s3://models-bucket/fleet/models" in result.output
    assert run("release", "v2", "--root", ROOT).exit_code == 0
    assert run("release", "v1", "--root", ROOT, "--group", "canary").exit_code == 0
    assert run("release", "v2", "--root", ROOT, "--group", "blue").exit_code == 0
    put(s3, "RELEASE.broken", "../v1 [bold]x[/bold]\n")
    result = run("releases", "--root", ROOT)
    assert result.exit_code == 0, result.output
    rows: dict[str, list[str]] = {}
    for line in result.output.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 4 and cells[0]:
            rows[cells[0]] = cells[1:]
        elif len(cells) == 4:  # a wrapped note
            rows[list(rows)[-1]][2] += " " + cells[3]
    assert list(rows) == ["RELEASE", "RELEASE.blue", "RELEASE.broken", "RELEASE.canary"]
    assert rows["RELEASE"][0] == "v2" and rows["RELEASE"][2].startswith("released 20")
    assert rows["RELEASE.blue"][0] == "v2" and rows["RELEASE.blue"][2].startswith("same as RELEASE; released")
    assert rows["RELEASE.canary"][0] == "v1" and rows["RELEASE.canary"][2].startswith("differs from RELEASE")
    assert rows["RELEASE.broken"][0] == "(invalid)" and "expected a release" in rows["RELEASE.broken"][2]
    assert "'../v1 [bold]x[/bold]'" in rows["RELEASE.broken"][2]  # shown as written, not as rich markup
    assert all(r[1].endswith(" UTC") for r in rows.values())


def test_boto3_client_reads_what_the_cli_wrote(s3):
    """The pointer the CLI wrote is what a plain boto3 client (the agent's) reads."""
    assert run("release", "v2", "--root", ROOT).exit_code == 0
    plain = boto3.client("s3", region_name="us-east-1")
    body = plain.get_object(Bucket=BUCKET, Key=f"{PREFIX}/RELEASE")["Body"].read()
    assert len(body) <= rel.MAX_BODY and rel.parse_pointer(body, ROOT) == "v2"
