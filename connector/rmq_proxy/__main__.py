"""`python -m connector.rmq_proxy --conf proxy.conf` (the `rocketha-proxy` console script)."""

import sys

from connector.rmq_proxy.main import main

sys.exit(main())
