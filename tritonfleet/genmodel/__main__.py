"""`python -m tritonfleet.genmodel ...` is `tritonfleet gen-model ...`."""

import sys

from tritonfleet.genmodel.cli import main

sys.exit(main())
