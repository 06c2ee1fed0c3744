"""The agent's shared AWS plumbing (``tritonfleet/agent/aws.py``): the one builder of its boto3 clients, as each
agent module uses it (retries, timeouts, user agent, region and endpoint, read back from the built client and seen
on the wire), and IMDSv2 (:class:`aws.Imds`) against a small IMDS on loopback (the lifecycle tests' FakeImds)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import botocore.endpoint
import pytest
from botocore.exceptions import ClientError

from tests.stubhttp import QuietHandler, serve
from tests.unit.test_asg_lifecycle import FakeImds
from tritonfleet.agent import aws, lifecycle, publish, queuetime, remote, watchrun

REGION = "eu-west-1"


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No AWS settings from this machine: fake credentials, no config files, no region, no retry settings."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL_S3", aws.IMDS_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture
def stubs():
    """Loopback servers to stop after the test."""
    made: list = []
    yield made
    stopping = [threading.Thread(target=server.shutdown) for server in made]  # each waits up to 0.5 s: at once
    for thread in stopping:
        thread.start()
    for thread, server in zip(stopping, made, strict=True):
        thread.join()
        server.server_close()


# -- the builder ---------------------------------------------------------------------------------------------------

def _settings(client) -> tuple:
    config = client.meta.config
    return (config.retries, config.connect_timeout, config.read_timeout, config.user_agent_extra)


def test_the_builder_bounds_every_request_and_names_the_agent(isolated):
    client = aws.client("s3", region=REGION)
    assert _settings(client) == ({"mode": "standard", "total_max_attempts": aws.ATTEMPTS}, aws.CONNECT_TIMEOUT,
                                 aws.READ_TIMEOUT, "tritonfleet-agent")
    assert (aws.ATTEMPTS, aws.CONNECT_TIMEOUT, aws.READ_TIMEOUT) == (3, 5.0, 30.0)
    assert client.meta.region_name == REGION and client.meta.config.region_name == REGION
    assert client.meta.endpoint_url == f"https://s3.{REGION}.amazonaws.com"
    assert client.meta.service_model.service_name == "s3"


def test_the_builder_takes_each_setting_region_and_endpoint(isolated):
    client = aws.client("autoscaling", region="ap-south-1", endpoint_url="http://127.0.0.1:5000",
                        connect_timeout=1.5, read_timeout=7, attempts=9, mode="adaptive", user_agent_extra="x-y",
                        max_pool_connections=21, s3={"addressing_style": "path"})
    assert _settings(client) == ({"mode": "adaptive", "total_max_attempts": 9}, 1.5, 7, "x-y")
    assert client.meta.region_name == "ap-south-1"
    assert client.meta.endpoint_url == "http://127.0.0.1:5000"
    assert client.meta.config.max_pool_connections == 21
    assert client.meta.config.s3 == {"addressing_style": "path"}
    assert client.meta.service_model.service_name == "autoscaling"


def test_without_attempts_botocore_counts_them_as_configured(isolated, monkeypatch):
    assert aws.client("s3", region=REGION, attempts=None).meta.config.retries == {"mode": "standard"}
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "7")
    assert aws.client("s3", region=REGION, attempts=None).meta.config.retries == {
        "mode": "standard", "total_max_attempts": 7}
    assert aws.client("s3", region=REGION, attempts=2).meta.config.retries["total_max_attempts"] == 2  # ours wins


def test_without_a_region_it_is_boto3s(isolated, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ca-central-1")
    assert aws.client("cloudwatch", region=None).meta.region_name == "ca-central-1"


def test_the_retries_and_the_user_agent_reach_the_wire(isolated, stubs, monkeypatch):
    """A service that answers 503 to everything: the request is tried ``attempts`` times, each with our agent."""
    agents: list[str] = []

    class Handler(QuietHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            agents.append(self.headers.get("User-Agent", ""))
            self._reply(503, b"")

    server, url = serve(Handler)
    stubs.append(server)
    monkeypatch.setattr(botocore.endpoint.time, "sleep", lambda s: None)  # botocore's backoff between attempts
    for attempts in (4, 1):
        agents.clear()
        client = aws.client("sts", region="us-east-1", endpoint_url=url, attempts=attempts)
        with pytest.raises(ClientError, match=r"\(503\)"):
            client.get_caller_identity()
        assert len(agents) == attempts
        assert all("tritonfleet-agent" in agent for agent in agents), agents


# -- each agent module's client, built by aws.client with its own settings ---------------------------------------

def test_each_agent_client_keeps_its_own_settings(isolated):
    asg = lifecycle.make_client("autoscaling", REGION)
    assert _settings(asg) == ({"mode": "adaptive", "total_max_attempts": 10}, 5.0, 10.0, "tritonfleet-agent")
    assert asg.meta.region_name == REGION and asg.meta.service_model.service_name == "autoscaling"
    ec2 = lifecycle.make_client("ec2", REGION, "http://127.0.0.1:5000")
    assert ec2.meta.endpoint_url == "http://127.0.0.1:5000" and _settings(ec2) == _settings(asg)
    cloudwatch = queuetime.make_client(REGION, "http://127.0.0.1:5001")
    assert _settings(cloudwatch) == ({"mode": "standard", "total_max_attempts": 3}, 5.0, 10.0, "tritonfleet-agent")
    assert cloudwatch.meta.endpoint_url == "http://127.0.0.1:5001"
    assert cloudwatch.meta.service_model.service_name == "cloudwatch"
    watchdog = watchrun.autoscaling_client(REGION, None)
    assert _settings(watchdog) == ({"mode": "standard", "total_max_attempts": 3}, 5, 15, "tritonfleet-watchdog")
    assert watchdog.meta.region_name == REGION
    opts = SimpleNamespace(region=REGION, concurrency=4, connect_timeout=2.0, read_timeout=20.0,
                           endpoint_url=None, path_style=False)
    s3 = remote.make_client(opts)
    assert _settings(s3) == ({"mode": "standard", "total_max_attempts": 3}, 2.0, 20.0, "tritonfleet-agent")
    assert s3.meta.config.max_pool_connections == 8 and s3.meta.config.s3 is None


def test_the_qa_upload_client_keeps_botocores_count_of_attempts(isolated, monkeypatch, tmp_path):
    built: list = []
    real = aws.client

    def recording(*args, **kwargs):
        built.append(real(*args, **kwargs))
        raise RuntimeError("stop before uploading")

    monkeypatch.setattr(aws, "client", recording)
    report = tmp_path / "r.json"
    report.write_text("{}")
    with pytest.raises(RuntimeError, match="stop before uploading"):
        publish.upload([str(report)], "s3://bucket/qa/", "http://127.0.0.1:5002", REGION)
    (client,) = built
    assert _settings(client) == ({"mode": "standard"}, 10, 60, "tritonfleet-agent")
    assert client.meta.endpoint_url == "http://127.0.0.1:5002" and client.meta.region_name == REGION
    assert client.meta.service_model.service_name == "s3"


# -- IMDSv2 --------------------------------------------------------------------------------------------------------

@pytest.fixture
def imds(stubs):
    fake = FakeImds("i-0123456789abcdef0", region=REGION, states=["InService"])
    stubs.append(fake.server)
    return fake


def test_imds_gives_the_instance_and_its_region_with_a_token(imds):
    assert lifecycle.Imds is aws.Imds  # lifecycle's name for it, as before
    found = aws.Imds(imds.url + "/")
    assert found.base == imds.url
    assert found.identity() == ("i-0123456789abcdef0", REGION)
    assert found.get(lifecycle.TARGET_STATE) == "InService"
    assert found.get("no/such/item") is None  # 404: no such item
    assert imds.unauthorized == 0


def test_imds_is_found_at_the_environments_address_and_the_argument_wins(imds, monkeypatch):
    monkeypatch.setenv(aws.IMDS_ENV, imds.url)
    assert aws.Imds().identity() == ("i-0123456789abcdef0", REGION)
    assert aws.Imds("http://127.0.0.1:9").base == "http://127.0.0.1:9"
    monkeypatch.delenv(aws.IMDS_ENV)
    assert aws.Imds().base == aws.DEFAULT_IMDS == "http://169.254.169.254"


def test_imds_sends_the_token_and_its_lifetime():
    seen: list = []

    def fetch(method, url, headers, timeout):
        seen.append((method, url, headers, timeout))
        return (200, " tok \n") if method == "PUT" else (200, "i-1\n" if url.endswith("instance-id") else "r-1")

    assert aws.Imds("http://imds", timeout=0.5, fetch=fetch, token_ttl=60).identity() == ("i-1", "r-1")
    assert seen == [
        ("PUT", "http://imds/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60"}, 0.5),
        ("GET", "http://imds/latest/meta-data/instance-id", {"X-aws-ec2-metadata-token": "tok"}, 0.5),
        ("GET", "http://imds/latest/meta-data/placement/region", {"X-aws-ec2-metadata-token": "tok"}, 0.5)]
    seen.clear()
    aws.Imds("http://imds", fetch=fetch).token()
    assert seen[0][2:] == ({"X-aws-ec2-metadata-token-ttl-seconds": str(aws.TOKEN_TTL)}, aws.IMDS_TIMEOUT)


def test_imds_failures_are_one_line_naming_the_address(imds):
    closed = aws.Imds("http://127.0.0.1:9", timeout=1)  # the discard port: nothing listens
    with pytest.raises(aws.ImdsError, match=r"^instance metadata at http://127\.0\.0\.1:9: \S") as refused:
        closed.identity()
    assert "\n" not in str(refused.value)
    with pytest.raises(aws.ImdsError, match=f"^instance metadata at {imds.url}/elsewhere: no IMDSv2 token "
                                            r"\(HTTP 400\)$"):
        aws.Imds(imds.url + "/elsewhere").token()  # FakeImds refuses a token anywhere else
    with pytest.raises(aws.ImdsError, match=f"^instance metadata at {imds.url}: instance-id: HTTP 401$"):
        aws.Imds(imds.url).get("instance-id", token="not-the-token")
    empty = aws.Imds("http://imds", fetch=lambda m, u, h, t: (200, "tok" if m == "PUT" else " "))
    with pytest.raises(aws.ImdsError, match="^instance metadata at http://imds: no instance-id or placement/region$"):
        empty.identity()


def test_the_http_helper_bounds_the_body(imds):
    with pytest.raises(OSError, match=f"^more than 3 bytes from {imds.url}/latest/api/token$"):
        aws.http_request("PUT", imds.url + "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "1"}, 1,
                         limit=3)
    assert aws.http_request("GET", imds.url + "/latest/meta-data/instance-id", {}, 1) == (401, "")


def test_sessions_share_one_model_loader_each_with_its_own_credentials_and_region(isolated, monkeypatch):
    """:func:`aws.session`: every session of a process reads a service's model once (botocore's data loader, shared),
    and each still reads its credentials and region when it is made; boto3's data directory stays listed once."""
    import botocore.loaders

    parsed: list[str] = []
    real = botocore.loaders.JSONFileLoader.load_file

    def counting(self, file_path):
        parsed.append(str(file_path))
        return real(self, file_path)

    monkeypatch.setattr(botocore.loaders.JSONFileLoader, "load_file", counting)
    monkeypatch.setattr(aws, "_LOADER", None)  # as in a new process
    first = aws.client("s3", region=REGION)
    models = [p for p in parsed if "/s3/" in p and "service-2" in p]
    parsed.clear()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "another")
    again = aws.session(region_name="us-west-2")
    second = again.client("s3")
    assert not [p for p in parsed if "service-2" in p], f"parsed again: {parsed}"
    assert models, "the first client read no S3 model"
    assert second.meta.region_name == "us-west-2" and first.meta.region_name == REGION
    assert again.get_credentials().access_key == "another"
    assert first._request_signer._credentials.access_key == "testing"
    loader = again._session.get_component("data_loader")
    assert loader is aws.session()._session.get_component("data_loader")
    paths = list(loader.search_paths)
    for _ in range(3):
        aws.session()
    assert loader.search_paths == paths and len(paths) == len(set(paths))
