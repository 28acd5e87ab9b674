import sys

from wheelq.cli import main

sys.exit(main())
