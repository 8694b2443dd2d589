"""`python -m ha.cluster` (same as `rocketha-cluster`).

The server extra is checked before ha.cluster.main is imported (conf/extras.py's shim
pattern, as ha/cluster_entry.py does for the console script): without it, one line naming
the extra and exit status 2, not an ImportError traceback.
"""

import sys

from conf.extras import require_extra

require_extra("python -m ha.cluster", "server")

from ha.cluster.main import main  # noqa: E402 - after the check, on purpose

sys.exit(main())
