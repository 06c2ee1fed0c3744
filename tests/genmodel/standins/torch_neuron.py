"""Stand-in for torch-neuron (inf1): records the import and registers torch.neuron.DataParallel."""

import sys
import types

from standin_common import preloaded, record

record("torch_neuron", "import", torch_preloaded=preloaded("torch"))

import torch  # noqa: E402


class DataParallel:
    def __init__(self, module, device_ids=None, dim=0):
        self.module = module
        self.device_ids = list(device_ids if device_ids is not None else [])
        self.num_workers = None
        record("torch.neuron", "DataParallel", device_ids=",".join(map(str, self.device_ids)))

    def __call__(self, *args):
        return self.module(*args)


neuron = types.ModuleType("torch.neuron")
neuron.DataParallel = DataParallel
torch.neuron = neuron
sys.modules["torch.neuron"] = neuron
