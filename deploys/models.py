"""Update the model repositories of a serving fleet without touching the containers:

    pyinfra inventories/inf2.py deploys/models.py        # or: make models INVENTORY=inventories/inf2.py

preflight -> agent (installed or updated when its wheelhouse changed) -> models (S3 sync: download what changed, verify, switch, reload the changed models on the
running servers; a model that fails to load switches back and fails the run with Triton's reason).
"""

from roles.agent import agent
from roles.models import models
from roles.preflight import preflight

preflight()
agent()
models()
