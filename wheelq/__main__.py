"""``python -m wheelq``: the `wheelq` command."""

import sys

from wheelq.cli import main

sys.exit(main())
