"""`rocketha-controller`: the server extra's check, then controller.main.

The entry-point shim pattern (conf/extras.py): the check runs before the import it guards.
"""

from conf.extras import require_extra

require_extra("rocketha-controller", "server")

from controller.main import main  # noqa: E402 - after the check, on purpose

__all__ = ["main"]
