"""Stand-in for TensorFlow 2: keras.models.load_model reads a JSON "SavedModel" of numpy ops.

The directory holds standin_model.json: {"inputs": [names], "outputs": {name: "add"|"sub"}}.
Calling the loaded model with a feed dict returns a dict of numpy arrays, like a Keras model
loaded from a SavedModel with named outputs.
"""

import json
import os
import types

import numpy as np
from standin_common import record

__version__ = "2.99.0+standin"

_OPS = {"add": np.add, "sub": np.subtract}


class _Model:
    def __init__(self, path):
        with open(os.path.join(path, "standin_model.json")) as f:
            spec = json.load(f)
        self.inputs = spec["inputs"]
        self.outputs = spec["outputs"]

    def __call__(self, feed):
        a, b = (np.asarray(feed[name]) for name in self.inputs)
        return {name: _OPS[op](a, b) for name, op in self.outputs.items()}


def _load_model(path):
    record("tensorflow", "load_model", path=path)
    return _Model(path)


keras = types.SimpleNamespace(models=types.SimpleNamespace(load_model=_load_model))
