"""`python -m evokernel` is the `evokernel` console script (used on machines without an install)."""

import sys

from evokernel.cli import main

sys.exit(main())
