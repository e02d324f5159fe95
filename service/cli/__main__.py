"""`python -m service.cli`: the `plumbline` command."""

import sys

from service.cli.main import main

sys.exit(main())
