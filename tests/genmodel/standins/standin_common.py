"""Shared logging for the Neuron stand-ins: one `tritonfleet-standin key=value ...` line per event."""

import os
import sys

TAG = "tritonfleet-standin"


def record(module: str, event: str, **fields: object) -> None:
    fields = {
        "module": module,
        "event": event,
        "pid": os.getpid(),
        "NEURON_RT_VISIBLE_CORES": os.environ.get("NEURON_RT_VISIBLE_CORES", "unset"),
        "NEURON_RT_NUM_CORES": os.environ.get("NEURON_RT_NUM_CORES", "unset"),
        **fields,
    }
    line = TAG + " " + " ".join(f"{k}={str(v).replace(' ', '')}" for k, v in fields.items())
    try:
        import triton_python_backend_utils as pb_utils

        pb_utils.Logger.log_info(line)
    except Exception:  # outside Triton
        print(line, file=sys.stderr, flush=True)


def preloaded(name: str) -> bool:
    return name in sys.modules
