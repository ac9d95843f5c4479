"""`python -m headway.cli`, as the `headway` command."""

import sys

from . import main

sys.exit(main())
