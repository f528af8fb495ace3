"""`python -m rsd.certify drafter=NAME [overrides] [--samples N]`: the command of rsd.certify.cli."""

import sys

from rsd.certify.cli import main

sys.exit(main())
