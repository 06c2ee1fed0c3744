"""Inventory of the local sandbox fleet (``tritonfleet sandbox up``): read from the sandbox state.

    pyinfra inventories/sandbox.py deploys/serve.py

Host data carries what a real inventory would: the instance type (real inventories set it or the
EC2 inventory fills it), the IMDS endpoint (real hosts use the default 169.254.169.254), the
repository URLs with their expected key fingerprints, the S3 endpoint and the Triton image
archive. Everything else comes from inventories/group_data/ and the role DEFAULTS.
"""

from tritonfleet.sandbox.inventory import sandbox_hosts

sandbox = sandbox_hosts()
