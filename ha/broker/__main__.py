"""`python -m ha.broker --conf FILE` is `rocketha-broker --conf FILE`."""

import sys

from ha.broker.main import main

sys.exit(main())
