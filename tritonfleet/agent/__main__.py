"""``python -m tritonfleet.agent``: the same as the ``tritonfleet-agent`` command."""

import sys

from .cli import main

sys.exit(main())
