"""`python -m ha.broker --conf FILE` is `rocketha-broker --conf FILE`.

The server extra is checked before ha.broker.main is imported (conf/extras.py's shim
pattern, as ha/broker_entry.py does for the console script): without it, one line naming the
extra and exit status 2, not an ImportError traceback.
"""

import sys

from conf.extras import require_extra

require_extra("python -m ha.broker", "server")

from ha.broker.main import main  # noqa: E402 - after the check, on purpose

sys.exit(main())
