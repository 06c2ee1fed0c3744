"""tritonfleet: provision and operate fleets of Triton Inference Server hosts.

Pure logic only (no pyinfra operations): instance catalog, placement, config models,
model generation, the sandbox fleet and the CLI. The same package is installed on hosts.
"""

__version__ = "0.1.0"
