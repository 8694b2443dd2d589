"""Replication.put at its boundary, for the system logs (ha/broker/system_log.py) over a real
store: the record goes into the real log, the status is the quorum's verdict a test scripts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from storage_engine import MessageBatch, MessageStore, PutResult, PutStatus, StoreConfig


class ScriptedPut:
    """Appends each batch to `store`; answers the next scripted verdict (PUT_OK when none is
    queued), or raises it when it is an exception."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.verdicts: list[PutStatus | Exception] = []

    def __call__(self, batch: MessageBatch) -> PutResult:
        result = self.store.append(batch)
        verdict = self.verdicts.pop(0) if self.verdicts else PutStatus.PUT_OK
        if isinstance(verdict, Exception):  # a put that failed after its append
            raise verdict
        return dataclasses.replace(result, status=verdict)


def open_small_store(directory: Path) -> MessageStore:
    """A store with 1 MiB segments whose confirm position the test moves (auto_confirm off),
    as the quorum would."""
    config = StoreConfig.from_properties({"mappedFileSizeCommitLog": str(1 << 20),
                                          "maxMessageSize": str(64 << 10)})
    return MessageStore(directory, config, auto_confirm=False)
