"""`python -m controller.admin`."""

import sys

from controller.admin.main import main

sys.exit(main())
