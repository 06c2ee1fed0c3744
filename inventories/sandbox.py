"""Inventory of the local sandbox fleet (``tritonfleet sandbox up``): read from the sandbox state.

    pyinfra inventories/sandbox.py deploys/serve.py     # the Triton hosts (the lb host is left out: no accelerator)
    pyinfra inventories/sandbox.py deploys/lb.py        # HAProxy on the lb group's host, in front of them

Host data carries what a real inventory would: the instance type (real inventories set it or the
EC2 inventory fills it), the IMDS endpoint (real hosts use the default 169.254.169.254), the
repository URLs with their expected key fingerprints, the S3 endpoint and the Triton image
archive. Everything else comes from inventories/group_data/ and the role DEFAULTS. Groups: ``sandbox`` (the
hosts with an accelerator, which serve Triton) and ``lb`` (the general-purpose load balancer ``sandbox up`` adds).
"""

from tritonfleet.sandbox.inventory import sandbox_hosts

sandbox = sandbox_hosts(accelerated=True)  # the Triton hosts
lb = sandbox_hosts(accelerated=False)  # the load balancer (general purpose, no accelerator): deploys/lb.py
