"""The shared leaf every process imports: configuration, TLS settings, request signing,
credentials files. It imports nothing of ours; the example `*.conf` files beside it are data."""

__all__: list[str] = []
