"""`python -m rsd.harness.plan OVERRIDES`: print the sweep's pre-flight plan (rsd.harness.plan.report)."""

import sys

from rsd.harness.plan.report import main

if __name__ == "__main__":
    sys.exit(main())
