"""`rocketha-cluster`: the server extra's check, then ha.cluster.main.

The entry-point shim pattern (conf/extras.py): the check runs before the import it guards,
and this package's __init__ imports nothing the extra provides.
"""

from conf.extras import require_extra

require_extra("rocketha-cluster", "server")

from ha.cluster.main import main  # noqa: E402 - after the check, on purpose

__all__ = ["main"]
