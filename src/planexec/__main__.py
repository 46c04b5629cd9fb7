"""``python -m planexec``: the command line (the same as the ``planexec`` script)."""

import sys

from planexec.cli.main import main

sys.exit(main())
