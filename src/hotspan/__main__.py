"""``python -m hotspan``: the same as the ``hotspan`` command."""

import sys

from hotspan.cli import main

sys.exit(main())
