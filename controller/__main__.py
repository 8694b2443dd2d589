"""`python -m controller --conf conf/controller.conf` (same as `rocketha-controller`)."""

import sys

from controller.main import main

sys.exit(main())
