"""``python -m posenc``: the ``posenc`` command."""

import sys

from .cli import main

sys.exit(main())
