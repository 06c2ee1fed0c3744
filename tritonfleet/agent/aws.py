"""The agent's AWS plumbing, shared by its modules: the one builder of its boto3 clients (:func:`client`: retries,
timeouts and user agent in a botocore ``Config``) and the instance metadata service (:class:`Imds`, IMDSv2).

Who builds what: the sync's S3 client (:func:`.remote.make_client`), the QA reports' upload
(:func:`.publish.upload`), CloudWatch for the queue time (:func:`.queuetime.make_client`), Auto Scaling and EC2
for the lifecycle hooks (:func:`.lifecycle.make_client`) and Auto Scaling for the watchdog's ``replace``
(:func:`.watchrun.autoscaling_client`); each keeps its own timeouts and attempts. The instance id and region
come from :class:`Imds` for the lifecycle hooks and the watchdog.

Standard library and boto3 only, Python 3.9 (the agent's rule). boto3 is imported when a client is made, not
with this module.
"""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Literal

#: botocore's retry modes: "standard" (the agent's), "adaptive" (standard plus a client-side rate limit, as the
#: fleet code's clients in tritonfleet/fleet/aws.py)
RetryMode = Literal["standard", "adaptive"]
USER_AGENT = "tritonfleet-agent"
CONNECT_TIMEOUT = 5.0  # seconds to connect, per attempt
READ_TIMEOUT = 30.0  # seconds for an answer, per attempt
ATTEMPTS = 3  # a request is tried this many times in all (botocore's default in its standard mode)

DEFAULT_IMDS = "http://169.254.169.254"
IMDS_ENV = "AWS_EC2_METADATA_SERVICE_ENDPOINT"  # moves the instance metadata service, as it does for boto3
IMDS_TIMEOUT = 2.0  # seconds per metadata request
TOKEN_TTL = 300  # seconds an IMDSv2 token lives (one is taken per look)
BODY_LIMIT = 32 * 1024 * 1024  # bytes an HTTP answer may have (:func:`http_request`)


class ImdsError(Exception):
    """The instance metadata service did not answer what was asked; ``str(e)`` is one line naming its address."""


def why(exc: BaseException) -> str:
    """An exception's text on one line (its class name when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


# -- boto3 clients -----------------------------------------------------------------------------------------------

def client(service: str, *, region: str | None, endpoint_url: str | None = None,
           connect_timeout: float = CONNECT_TIMEOUT, read_timeout: float = READ_TIMEOUT,
           attempts: int | None = ATTEMPTS, mode: RetryMode = "standard", user_agent_extra: str = USER_AGENT,
           **config: Any) -> Any:
    """A boto3 client of ``service`` from boto3's default credential chain (the instance profile on a host), each
    request bounded by ``connect_timeout`` and ``read_timeout`` and tried ``attempts`` times in all in botocore's
    retry ``mode`` (``attempts=None``: botocore's own count, which ``AWS_MAX_ATTEMPTS`` sets). ``region`` None:
    boto3's configuration; ``config``: more botocore ``Config`` options (``max_pool_connections``, ``s3``)."""
    from botocore.config import Config

    retries: Any = {"mode": mode}  # Any: botocore's stubs type it as a TypedDict of their own
    if attempts is not None:
        retries["total_max_attempts"] = attempts
    settings = Config(region_name=region, retries=retries, connect_timeout=connect_timeout,
                      read_timeout=read_timeout, user_agent_extra=user_agent_extra, **config)
    return session().client(service, endpoint_url=endpoint_url, config=settings)


#: botocore's data loader (service models, endpoints), shared by every session of this process: see :func:`session`
_LOADER: Any = None


def session(region_name: str | None = None) -> Any:
    """A new boto3 session (its own credentials and configuration, read from the environment now; ``region_name``
    as boto3's) on this process' one botocore data loader, which keeps each service model it has read: a model is
    parsed once per process, not once per client (the S3 model alone takes about a tenth of a second of CPU, EC2's a
    fifth). A long-lived agent (the pull loop, the watchdog) makes clients again and again, and so do the fleet's
    commands (fleet/aws.py). The data path is the first session's (``AWS_DATA_PATH``)."""
    import boto3
    import botocore.session

    global _LOADER
    core = botocore.session.Session()
    if _LOADER is None:
        _LOADER = core.get_component("data_loader")
    else:
        core.register_component("data_loader", _LOADER)
    made: Any = boto3.session.Session(botocore_session=core, region_name=region_name)  # Any: see client()
    paths = _LOADER.search_paths
    paths[:] = list(dict.fromkeys(paths))  # each boto3 session appends its own data directory: once is enough
    return made


# -- HTTP without a proxy (the instance metadata, local ports) ----------------------------------------------------

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through an http_proxy

#: ``(method, url, headers, timeout) -> (status, body)``; an OSError when nothing answers
Fetch = Callable[[str, str, dict[str, str], float], tuple[int, str]]


def http_request(method: str, url: str, headers: dict[str, str], timeout: float,
                 limit: int = BODY_LIMIT) -> tuple[int, str]:
    """``(status, body)``: an HTTP error status is returned, no answer is an OSError (ConnectionRefusedError when
    nothing listens); every socket operation bounded by ``timeout``, the body by ``limit`` bytes."""
    request = urllib.request.Request(url, method=method, headers=headers, data=b"" if method == "PUT" else None)
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            body = response.read(limit + 1)
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise (reason if isinstance(reason, OSError) else OSError(str(reason))) from None
    except http.client.HTTPException as exc:
        raise OSError(f"{type(exc).__name__}: {why(exc)}") from None
    if len(body) > limit:
        raise OSError(f"more than {limit} bytes from {url}")
    return status, body.decode("utf-8", "replace")


def _fetch(method: str, url: str, headers: dict[str, str], timeout: float) -> tuple[int, str]:
    return http_request(method, url, headers, timeout)


# -- the instance metadata service ---------------------------------------------------------------------------------

class Imds:
    """The instance metadata service, IMDSv2 (a token per look: they are local and cheap). Its address is
    ``endpoint``, else ``$AWS_EC2_METADATA_SERVICE_ENDPOINT``, else :data:`DEFAULT_IMDS`; every request is
    bounded by ``timeout`` and goes through ``fetch``. Every failure is an :class:`ImdsError`."""

    def __init__(self, endpoint: str | None = None, timeout: float = IMDS_TIMEOUT, fetch: Fetch = _fetch,
                 token_ttl: int = TOKEN_TTL) -> None:
        self.base = (endpoint or os.environ.get(IMDS_ENV) or DEFAULT_IMDS).rstrip("/")
        self.timeout = timeout
        self.fetch = fetch
        self.token_ttl = token_ttl

    def _call(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
        try:
            return self.fetch(method, self.base + path, headers, self.timeout)
        except OSError as exc:
            raise ImdsError(f"instance metadata at {self.base}: {why(exc)}") from None

    def token(self) -> str:
        """A fresh IMDSv2 session token."""
        code, text = self._call("PUT", "/latest/api/token",
                                {"X-aws-ec2-metadata-token-ttl-seconds": str(self.token_ttl)})
        if code != 200 or not text.strip():
            raise ImdsError(f"instance metadata at {self.base}: no IMDSv2 token (HTTP {code})")
        return text.strip()

    def get(self, path: str, token: str | None = None) -> str | None:
        """The metadata item ``path`` (under ``/latest/meta-data/``); None when there is none (404)."""
        code, text = self._call("GET", f"/latest/meta-data/{path}", {"X-aws-ec2-metadata-token": token or self.token()})
        if code == 404:
            return None
        if code != 200:
            raise ImdsError(f"instance metadata at {self.base}: {path}: HTTP {code}")
        return text.strip()

    def identity(self) -> tuple[str, str]:
        """``(instance id, region)``."""
        token = self.token()
        instance_id, region = self.get("instance-id", token), self.get("placement/region", token)
        if not instance_id or not region:
            raise ImdsError(f"instance metadata at {self.base}: no instance-id or placement/region")
        return instance_id, region
