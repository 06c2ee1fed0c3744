"""Host-side code: what runs on the hosts themselves (the S3 model-sync agent, the QA runner).

Installed into ``/opt/tritonfleet/venv`` on hosts from a wheelhouse built on the controller; it must run
on every supported host Python (3.9 to 3.12) with few dependencies, so it imports nothing from pyinfra,
the roles or the face.
"""
