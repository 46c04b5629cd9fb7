"""``python -m planexec``: the same command line as the ``planexec`` script (see `cli`)."""

from .cli import main

raise SystemExit(main())
