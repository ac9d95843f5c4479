"""`python -m headway`, as the `headway` command."""

import sys

from .cli import main

sys.exit(main())
