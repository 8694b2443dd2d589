"""`rocketha-console`: the controller's read-only web console (server and page)."""

__all__: list[str] = []
