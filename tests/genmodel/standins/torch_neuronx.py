"""Stand-in for torch-neuronx (inf2/trn): records the import; DataParallel calls the module on CPU."""

from standin_common import preloaded, record

record("torch_neuronx", "import", torch_preloaded=preloaded("torch"))

import torch  # noqa: E402  (after the record: the real module imports torch too)


class DataParallel:
    def __init__(self, module, device_ids=None, dim=0, set_dynamic_batching=True):
        self.module = module
        self.device_ids = list(device_ids if device_ids is not None else [])
        self.num_workers = len(self.device_ids)
        record("torch_neuronx", "DataParallel", device_ids=",".join(map(str, self.device_ids)))

    def __call__(self, *args):
        with torch.no_grad():
            return self.module(*args)
