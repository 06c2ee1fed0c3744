"""HAProxy in front of the fleet's Triton servers, on the hosts of the inventory's lb group:

    pyinfra inventories/sandbox.py deploys/lb.py        # or: make lb INVENTORY=inventories/sandbox.py

preflight (every host: the Triton hosts' data says where their servers are; general-purpose instance types are
accepted in the lb group) -> lb (HAProxy package, haproxy.cfg checked with `haproxy -c` and reloaded only when it
changed, running and enabled). A second run changes nothing.
"""

from roles.lb import lb
from roles.preflight import preflight

preflight(needs_accelerator=False)
lb()
