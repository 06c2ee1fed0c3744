"""AWS clients for one region, and bounded polling."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from tritonfleet.agent import aws as agent_aws
from tritonfleet.fleet.tags import FleetError

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: Every AWS client of the fleet code retries (botocore's adaptive mode: the standard retries, plus a client
#: side rate limit that backs off when AWS throttles), 10 attempts at most, each bounded in time, as SkyPilot's
#: AWS provisioner configures its clients. A throttle that outlasts them is one line (:func:`one_line`).
MAX_ATTEMPTS = 10
THROTTLES = ("RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
             "RequestThrottled", "SlowDown")


def client_config() -> Any:
    """The botocore ``Config`` of every fleet client (retries, timeouts)."""
    from botocore.config import Config

    return Config(retries={"total_max_attempts": MAX_ATTEMPTS, "mode": "adaptive"}, connect_timeout=10,
                  read_timeout=60)


def client(service: str, region: str | None, session: Any = None, endpoint: str | None = None) -> Any:
    """A boto3 client with :func:`client_config` (``session``: boto3's default chain when None; ``endpoint``:
    an S3-compatible store's URL, None for AWS); its failed attempts are logged at DEBUG (:func:`_log_attempt`)."""
    extra = {"endpoint_url": endpoint} if endpoint else {}
    made = (session or boto3).client(service, region_name=region, config=client_config(), **extra)
    events = getattr(getattr(made, "meta", None), "events", None)  # None: a stand-in of tests
    if events is not None:
        events.register("needs-retry", _log_attempt)
    return made


def _log_attempt(response: Any = None, operation: Any = None, attempts: int = 0,
                 caught_exception: BaseException | None = None, **_: Any) -> None:
    """botocore's ``needs-retry`` event, for the log only: an attempt that failed (throttled, a 5xx, a dropped
    connection), before botocore's retry handler decides whether another one follows. Returns None, which
    leaves that decision to it."""
    if caught_exception is not None:
        why = f"{type(caught_exception).__name__}: {caught_exception}"
    elif response is not None and getattr(response[0], "status_code", 200) >= 400:
        error = (response[1] or {}).get("Error", {}) if isinstance(response[1], dict) else {}
        why = " ".join(x for x in (str(error.get("Code") or ""), f"HTTP {response[0].status_code}") if x)
    else:
        return None
    name = f"{operation.service_model.service_name} {operation.name}" if operation is not None else "AWS call"
    logger.debug("%s: attempt %d of at most %d failed: %s", name, attempts, MAX_ATTEMPTS, " ".join(why.split()))
    return None


@dataclass
class Clients:
    """Lazily created boto3 clients of one region (``session`` defaults to boto3's own chain:
    environment, profile, instance profile; credentials are never read or printed here)."""

    region: str
    session: Any = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.region:
            raise FleetError("no AWS region: pass --region or set TRITONFLEET_REGION")
        if self.session is None:
            self.session = agent_aws.session(region_name=self.region)  # the process' one model loader

    def __getattr__(self, service: str) -> Any:
        if service.startswith("_"):
            raise AttributeError(service)
        name = {"asg": "autoscaling"}.get(service, service)
        if name not in self._cache:
            self._cache[name] = client(name, self.region, self.session)
        return self._cache[name]


def error_code(exc: BaseException) -> str:
    """The AWS error code of a ``ClientError`` ("" for anything else)."""
    return exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""


def one_line(exc: BaseException) -> str:
    """An AWS exception as one line: ``Code: message`` (no request ids, no credentials)."""
    if isinstance(exc, NoCredentialsError):
        return "no AWS credentials found (environment, ~/.aws or an instance profile)"
    if isinstance(exc, NoRegionError):
        return "no AWS region: pass --region or set TRITONFLEET_REGION"
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        text = f"{err.get('Code', 'Error')}: {err.get('Message', '')}"
        if err.get("Code") in THROTTLES:
            attempts = exc.response.get("ResponseMetadata", {}).get("RetryAttempts")
            tried = f" after {attempts + 1} attempts" if isinstance(attempts, int) else ""
            text = (f"AWS throttled the requests{tried} ({text}); run it again in a minute, or with fewer "
                    "concurrent tritonfleet runs against this account and region")
    elif isinstance(exc, BotoCoreError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def poll(check: Callable[[], T | None], *, timeout: float, interval: float, what: str,
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> T:
    """Call ``check`` until it returns something other than None; FleetError after ``timeout`` seconds."""
    deadline = clock() + timeout
    while True:
        result = check()
        if result is not None:
            return result
        if clock() >= deadline:
            raise FleetError(f"timed out after {timeout:.0f} s waiting for {what}")
        logger.debug("waiting for %s: next look in %g s", what, interval)
        sleep(interval)
