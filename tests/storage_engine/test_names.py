"""Topic names and queue ids: the one check before a path is built from a name (issue 16).

Goal: names a master, a client or a directory listing hands the store can never make it build a
path outside itself. Method: table of names through `topic_name_error` / `queue_dir`, and a
store asked to delete or index them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_engine import InvalidNameError, MessageStore, StoreConfig, topic_name_error
from storage_engine.names import queue_dir

BAD = ["", "..", "../../..", "a/b", "a\n", "a b", "é", "x" * 128, "a\x00", ".hidden", "%2e/"]
GOOD = ["orders", "a", "%RETRY%group-1", "x" * 127, "A_b-C|d"]


@pytest.mark.parametrize("name", BAD)
def test_bad_names_are_refused(name: str, tmp_path: Path) -> None:
    assert topic_name_error(name) is not None
    with pytest.raises(InvalidNameError):
        queue_dir(tmp_path, name, 0)


@pytest.mark.parametrize("name", GOOD)
def test_good_names_stay_inside(name: str, tmp_path: Path) -> None:
    assert topic_name_error(name) is None
    path = queue_dir(tmp_path, name, 3)
    assert path.parent.parent == tmp_path and path.name == "3"


@pytest.mark.parametrize("queue_id", [-1, 65536, True, "1"])
def test_bad_queue_ids_are_refused(queue_id: object, tmp_path: Path) -> None:
    with pytest.raises(InvalidNameError):
        queue_dir(tmp_path, "orders", queue_id)  # type: ignore[arg-type]


def test_store_refuses_to_delete_outside_itself(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    store = MessageStore(tmp_path / "store", StoreConfig(commit_log_segment_size_bytes=1 << 20,
                                                         message_size_max_bytes=4096))
    try:
        with pytest.raises(InvalidNameError):
            store.delete_topic("../../victim")
        assert victim.exists()
    finally:
        store.close()
    (tmp_path / "store" / "consumequeue" / "..weird").mkdir()  # left by hand: ignored on open
    MessageStore(tmp_path / "store", StoreConfig(commit_log_segment_size_bytes=1 << 20,
                                                 message_size_max_bytes=4096)).close()


@pytest.mark.parametrize("link_at", ["topic", "queue"])
def test_a_symlink_out_of_the_store_is_refused(link_at: str, tmp_path: Path) -> None:
    """queue_dir checks only the new components with lstat (first-put cost, issue 42): a
    symlink there still sends it to the full resolve, which refuses a way out."""
    root, outside = tmp_path / "consumequeue", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    if link_at == "topic":
        (root / "orders").symlink_to(outside)
    else:
        (root / "orders").mkdir()
        (root / "orders" / "3").symlink_to(outside)
    with pytest.raises(InvalidNameError):
        queue_dir(root, "orders", 3)
    if link_at == "queue":  # its sibling is a plain (missing) directory
        assert queue_dir(root, "orders", 4) == root / "orders" / "4"


def test_a_symlink_inside_the_store_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "orders").symlink_to(tmp_path / "elsewhere")
    assert queue_dir(tmp_path, "orders", 3) == tmp_path / "orders" / "3"
