"""`python -m controller.console`."""

import sys

from controller.console.app import main

sys.exit(main())
