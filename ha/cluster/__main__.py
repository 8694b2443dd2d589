"""`python -m ha.cluster`."""

import sys

from ha.cluster.main import main

sys.exit(main())
