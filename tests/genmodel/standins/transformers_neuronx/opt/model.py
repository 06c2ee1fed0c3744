"""Stand-in for transformers_neuronx.opt.model.OPTForSampling.

sample(ids, sequence_length) returns the prompt followed by ids + sequence_length, so a test can
check the exact output; from_pretrained records every load parameter it receives.
"""

import os

import torch
from standin_common import record


class OPTForSampling:
    def __init__(self, path, batch_size, amp, tp_degree, n_positions):
        self.path, self.batch_size, self.amp = path, batch_size, amp
        self.tp_degree, self.n_positions = tp_degree, n_positions

    @classmethod
    def from_pretrained(cls, path, batch_size=1, amp="f32", tp_degree=2, n_positions=2048, **kwargs):
        if not os.path.isdir(path):
            raise FileNotFoundError(f"no split checkpoint at {path}")
        record(
            "transformers_neuronx",
            "from_pretrained",
            path=path,
            batch_size=batch_size,
            amp=amp,
            tp_degree=tp_degree,
            n_positions=n_positions,
        )
        return cls(path, batch_size, amp, tp_degree, n_positions)

    def to_neuron(self):
        record("transformers_neuronx", "to_neuron")

    def sample(self, input_ids, sequence_length, **kwargs):
        if input_ids.shape[0] != self.batch_size:
            raise ValueError(f"batch {input_ids.shape[0]} != compiled batch size {self.batch_size}")
        return torch.cat([input_ids, input_ids + sequence_length], dim=1)
