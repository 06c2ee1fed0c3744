"""Prometheus exporters on every host (node exporter; neuron-monitor on Neuron hosts; DCGM exporter on GPU hosts):

    pyinfra inventories/inf2.py deploys/monitoring.py       # or: make monitoring INVENTORY=inventories/inf2.py

preflight -> monitoring (on Neuron hosts with the host agent: its Python runs neuron-monitor-prometheus.py).
Scrape targets:
tritonfleet monitoring targets --inventory inventories/inf2.py --out DIR.
"""

from roles.monitoring import monitoring
from roles.preflight import preflight

preflight()
monitoring()
