"""Stand-in for tensorflow-neuronx (inf2/trn): records the import."""

from standin_common import preloaded, record

record("tensorflow_neuronx", "import", tensorflow_preloaded=preloaded("tensorflow"))

import tensorflow  # noqa: E402,F401
