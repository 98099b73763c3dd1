"""`python -m workbench <command>`: see workbench.cli."""

import sys

from workbench.cli import main

sys.exit(main())
