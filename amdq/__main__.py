"""`python -m amdq ...`: the `amdq` command without its console script."""
import sys

from .cli import main

sys.exit(main())
