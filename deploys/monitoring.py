"""Prometheus exporters on every host (node exporter; neuron-monitor on Neuron hosts; DCGM exporter on GPU hosts):

    pyinfra inventories/inf2.py deploys/monitoring.py       # or: make monitoring INVENTORY=inventories/inf2.py

preflight -> monitoring (on Neuron hosts with the host agent: its Python runs neuron-monitor-prometheus.py; the
load balancers of the lb group get the node exporter too, HAProxy exports its own metrics).
Scrape targets:
tritonfleet monitoring targets --inventory inventories/inf2.py --out DIR.
"""

from roles.monitoring import monitoring
from roles.preflight import preflight

preflight(needs_accelerator=False)  # the lb group's hosts: node exporter
monitoring()
