"""`python -m diana.tui.cli`: the `diana` command."""

import sys

from . import main

sys.exit(main())
