"""``python -m rush``: the same as the ``rush`` command."""

import sys

from rush.cli import main

sys.exit(main())
