"""Examples that run against a local cluster from a checkout (not shipped in the wheel:
pyproject's packages.find lists only the library's packages).

    examples/demo/   `python3 build.py demo`: Spark ingest through an automatic master failover
"""

from __future__ import annotations

__all__: list[str] = []
