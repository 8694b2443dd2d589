"""`python -m controller --conf conf/controller.conf` (same as `rocketha-controller`).

The server extra is checked before controller.main is imported (conf/extras.py's shim
pattern, as controller/entry.py does for the console script): without it, one line naming
the extra and exit status 2, not an ImportError traceback.
"""

import sys

from conf.extras import require_extra

require_extra("python -m controller", "server")

from controller.main import main  # noqa: E402 - after the check, on purpose

sys.exit(main())
