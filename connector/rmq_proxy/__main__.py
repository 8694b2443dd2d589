"""`python -m connector.rmq_proxy --conf proxy.conf` (the `rocketha-proxy` console script).

The rocketmq extra is checked before connector.rmq_proxy.main is imported (conf/extras.py's
shim pattern, as connector/rmq_proxy_entry.py does for the console script).
"""

import sys

from conf.extras import require_extra

require_extra("python -m connector.rmq_proxy", "rocketmq")

from connector.rmq_proxy.main import main  # noqa: E402 - after the check, on purpose

sys.exit(main())
