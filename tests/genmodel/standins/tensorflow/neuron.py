"""Stand-in for tensorflow-neuron (inf1): records the import."""

from standin_common import record

record("tensorflow.neuron", "import")
