"""Fleet code: EC2 lifecycle (boto3), the dynamic inventory, rolling rollout with gates and rollback.

It drives hosts through :mod:`tritonfleet.access` and reads what a host runs from the contract in
:mod:`tritonfleet.hostcontract` (the server record's ``previous`` is the rollback target).
"""
