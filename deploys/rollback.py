"""Roll hosts back to a point a rollout recorded (used by `tritonfleet rollout` on a host that failed a gate):

    pyinfra INVENTORY deploys/rollback.py --limit HOST --data rollback_point='{"servers": {...}, "models_version": "..."}'

preflight -> rollback (containers back to their recorded spec, models back to their kept version).
"""

from roles.preflight import preflight
from roles.rollback import rollback

preflight()
rollback()
