"""A bare host to a serving Triton:

    pyinfra inventories/inf2.py deploys/serve.py

preflight -> base -> neuron, efa or nvidia -> docker -> agent -> models -> triton (image, compatibility gate,
containers, health gate) -> models after a new image (the S3 sync, when the servers' image changed with
triton_python_requirements: new models that need new packages load on the image that has them) -> monitoring
(only with monitoring_with_serve: the exporters of deploys/monitoring.py) -> watchdog (only with
watchdog_enabled: the host watchdog service).
"""

from roles.agent import agent
from roles.base import base
from roles.docker import docker
from roles.efa import efa
from roles.models import models, models_after_image
from roles.monitoring import monitoring_with_serve
from roles.neuron import neuron
from roles.nvidia import nvidia
from roles.preflight import preflight
from roles.sysctl import sysctl
from roles.triton import triton
from roles.watchdog import watchdog

preflight(installs_driver=True)
base()
sysctl()
neuron()
efa()
nvidia()
docker()
agent()
models()
triton()
models_after_image()
monitoring_with_serve()
watchdog()
