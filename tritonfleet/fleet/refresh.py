"""Instance refresh of an Auto Scaling group: the ``rollout --asg`` primitives.

:func:`start_refresh` starts a rolling replacement with checkpoints (``CheckpointPercentages`` and
``CheckpointDelay``: pause after that share of the group is replaced, e.g. to check a canary) and a
``MinHealthyPercentage``; :func:`wait_refresh` polls ``DescribeInstanceRefreshes`` until the refresh
ends and returns a :class:`RefreshOutcome` whose ``line()`` is the one-line result. Both take an
``autoscaling`` client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from botocore.exceptions import ClientError

from tritonfleet.fleet.aws import error_code, one_line, poll
from tritonfleet.fleet.tags import FleetError

logger = logging.getLogger(__name__)

TERMINAL = {"Successful", "Failed", "Cancelled", "RollbackSuccessful", "RollbackFailed"}
MAX_DELAY = 172800


@dataclass(frozen=True)
class RefreshOutcome:
    group: str
    refresh_id: str
    status: str
    percent: int
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "Successful"

    def line(self) -> str:
        text = f"{self.group}: instance refresh {self.refresh_id} {self.status.lower()} ({self.percent}% replaced)"
        return text + (f": {' '.join(self.reason.split())}" if self.reason else "")


def _check(min_healthy: int, checkpoints: Sequence[int], checkpoint_delay: int | None,
           max_healthy: int | None) -> None:
    if not 0 <= min_healthy <= 100:
        raise FleetError(f"min healthy {min_healthy}%: expected 0-100")
    if max_healthy is not None and not (100 <= max_healthy <= 200 and max_healthy - min_healthy <= 100):
        raise FleetError(f"max healthy {max_healthy}%: expected 100-200 and at most min + 100")
    if list(checkpoints) != sorted(set(checkpoints)) or any(not 1 <= c <= 100 for c in checkpoints):
        raise FleetError(f"checkpoints {list(checkpoints)}: expected ascending percentages 1-100")
    if checkpoint_delay is not None and (not checkpoints or not 0 <= checkpoint_delay <= MAX_DELAY):
        raise FleetError(f"checkpoint delay {checkpoint_delay}: needs checkpoints and 0-{MAX_DELAY} s")


def start_refresh(asg, group: str, *, min_healthy: int = 90, checkpoints: Sequence[int] = (),
                  checkpoint_delay: int | None = None, max_healthy: int | None = None,
                  warmup: int | None = None, skip_matching: bool = True,
                  launch_template: tuple[str, int] | None = None) -> str:
    """Start a rolling instance refresh; returns its id. ``launch_template`` (id, version) sets the desired
    configuration; without it the group's own launch template version is rolled out."""
    _check(min_healthy, checkpoints, checkpoint_delay, max_healthy)
    prefs: dict = {"MinHealthyPercentage": min_healthy, "SkipMatching": skip_matching}
    if checkpoints:
        prefs["CheckpointPercentages"] = list(checkpoints)
    if checkpoint_delay is not None:
        prefs["CheckpointDelay"] = checkpoint_delay
    if max_healthy is not None:
        prefs["MaxHealthyPercentage"] = max_healthy
    if warmup is not None:
        prefs["InstanceWarmup"] = warmup
    kwargs: dict = {"AutoScalingGroupName": group, "Strategy": "Rolling", "Preferences": prefs}
    if launch_template:
        kwargs["DesiredConfiguration"] = {"LaunchTemplate": {"LaunchTemplateId": launch_template[0],
                                                             "Version": str(launch_template[1])}}
    logger.debug("%s: starting an instance refresh: %s%s", group, prefs,
                 f", launch template {launch_template[0]} version {launch_template[1]}" if launch_template else "")
    try:
        return asg.start_instance_refresh(**kwargs)["InstanceRefreshId"]
    except ClientError as exc:
        if error_code(exc) == "InstanceRefreshInProgress":
            raise FleetError(f"{group}: an instance refresh is already in progress; wait for it or cancel it "
                             "(aws autoscaling cancel-instance-refresh)") from None
        raise FleetError(f"{group}: cannot start an instance refresh: {one_line(exc)}") from None


def describe_refresh(asg, group: str, refresh_id: str) -> RefreshOutcome:
    try:
        found = asg.describe_instance_refreshes(AutoScalingGroupName=group, InstanceRefreshIds=[refresh_id])
    except ClientError as exc:
        raise FleetError(f"{group}: cannot describe instance refresh {refresh_id}: {one_line(exc)}") from None
    refreshes = found.get("InstanceRefreshes", [])
    if not refreshes:
        raise FleetError(f"{group}: instance refresh {refresh_id} not found")
    item = refreshes[0]
    outcome = RefreshOutcome(group, refresh_id, item.get("Status", "Pending"), int(item.get("PercentageComplete", 0)),
                             item.get("StatusReason", ""))
    logger.debug("%s: instance refresh %s: %s, %d%%%s", group, refresh_id, outcome.status, outcome.percent,
                 f" ({outcome.reason})" if outcome.reason else "")
    return outcome


def wait_refresh(asg, group: str, refresh_id: str, *, timeout: float = 7200, interval: float = 30,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 on_progress: Callable[[RefreshOutcome], None] | None = None) -> RefreshOutcome:
    """Poll until the refresh ends (successful, failed, cancelled, rolled back); FleetError on timeout."""
    seen: list[tuple[str, int]] = []

    def check() -> RefreshOutcome | None:
        outcome = describe_refresh(asg, group, refresh_id)
        if on_progress and (outcome.status, outcome.percent) not in seen:
            seen.append((outcome.status, outcome.percent))
            on_progress(outcome)
        return outcome if outcome.status in TERMINAL else None

    return poll(check, timeout=timeout, interval=interval, sleep=sleep, clock=clock,
                what=f"instance refresh {refresh_id} of {group}")
