"""Host preparation only (the replacement for Triton's setup-pre-container.sh):

    pyinfra inventories/inf2.py deploys/neuron.py

preflight -> base -> neuron (repo, headers, pinned driver/tools, legacy cleanup, device check) -> efa
-> nvidia on GPU hosts -> docker engine.
"""

from roles.base import base
from roles.docker import docker
from roles.efa import efa
from roles.neuron import neuron
from roles.nvidia import nvidia
from roles.preflight import preflight

preflight(installs_driver=True)
base()
neuron()
efa()
nvidia()
docker()
