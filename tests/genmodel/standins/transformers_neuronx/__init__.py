"""Stand-in for transformers-neuronx: records the import."""

from standin_common import preloaded, record

record("transformers_neuronx", "import", torch_preloaded=preloaded("torch"))
