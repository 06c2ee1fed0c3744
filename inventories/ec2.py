"""Dynamic inventory of an EC2 fleet (``tritonfleet fleet up``): its running instances, from their tags.

    TRITONFLEET_REGION=us-east-1 TRITONFLEET_FLEET=prod pyinfra inventories/ec2.py deploys/serve.py

Groups: the family (inf1, inf2, trn1, trn2, gpu), fleet_<fleet> and role_<role>; each host carries
instance_type, its address, SSH user and key (see tritonfleet/fleet/inventory.py). Fleet-wide data goes
in group_data/ as for any inventory (group_data/fleet_prod.py, group_data/inf2.py, ...).
"""

from tritonfleet.fleet.inventory import groups_from_env

# Group names depend on the fleet, so they are set as module-level names here.
globals().update(groups_from_env())
