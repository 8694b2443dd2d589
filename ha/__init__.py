"""Replication (`ha.replication`), the broker process (`ha.broker`) and the local cluster tool
(`ha.cluster`). Depends on storage_engine, controller.api, connector.protocol and conf only."""

__all__: list[str] = []
