"""``python -m benches``: see `benches.cli` (or ``python -m benches --help``)."""

import sys

from benches.cli import main

sys.exit(main())
