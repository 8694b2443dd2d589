"""Removing a deleted topic's table from the tier, when the deletion asks for it.

Deleting a topic leaves its table by default: the table is history of its own (its retention
is topicTableRetentionHours, not the log's), and a topic deleted by mistake keeps its past.
`rocketha-admin topic delete --topic T --delete-table` asks each replica set's master to remove
`<tieredStoreUrl>/tables/<T>` as well (the `delete_table` field of `delete_topic`). The
removal is of every object under that prefix, through the tier's own object IO (file:// and
s3://, the tier's endpoint and keys), so it needs no deltalake. It is only done once the topic
is gone from this broker and no pass of its writer is running (TopicTables.remove_table),
so the writer cannot recreate the table behind it.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from storage_engine import StoreConfig
from storage_engine.tiered import FileIO, FileIOOptions, resolve_tier_url

__all__ = ["TABLES_PREFIX", "remove_table"]

TABLES_PREFIX = "tables"  # <tier URL>/tables/<topic> (ha/broker/topic_table.py's layout)


def remove_table(store_config: StoreConfig, store_dir: Path, topic: str) -> bool:
    """Remove `topic`'s table under this broker's tier; whether there was one. Raises
    TieredStorageError when the object store fails (nothing is half-hidden: run it again)."""
    tier = FileIO(f"{resolve_tier_url(store_config.tiered, store_dir)}/{TABLES_PREFIX}",
                  FileIOOptions.from_config(store_config.tiered))
    return tier.delete_tree(urllib.parse.quote(topic, safe="-_"))
