"""``python -m planexec``: the command line (the same as the ``planexec`` script)."""

import sys

from .cli import main

sys.exit(main())
