"""`python -m service.cli ...`: the `loomtune` command."""

import sys

from service.cli.main import main

sys.exit(main())
