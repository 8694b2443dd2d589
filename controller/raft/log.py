"""RaftLog: the in-memory view of one node's log, with its persistence and apply cursors.

    snapshot.entry_index      applied_index     committed_index    stable_index     last_index
    |  compacted (in the     |                 |                  |                |
    |  snapshot)             |<- applied ----->|<- to apply ----->|<- to persist ->|
    ----------------------------------------------------------------------------------------
                              entries[0] is snapshot.entry_index + 1

- `stable_index`: entries up to here are on disk (the shell persisted a Ready that held them).
  A conflict truncation below it pulls it back, so the next Ready rewrites from that index.
- `committed_index` only grows, and a truncation never reaches it (asserted: Raft's Log
  Matching and Leader Completeness rely on it).
- Committed entries are handed out for applying only up to `last_index`; the shell persists a
  Ready's entries before applying its committed ones, so nothing unpersisted is ever applied.

The whole log lives in memory: the controller's log is small and snapshots bound it.
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.raft.messages import Entry, Snapshot

__all__ = ["RaftLog"]


class RaftLog:
    def __init__(self, snapshot: Snapshot, entries: Sequence[Entry], committed_index: int) -> None:
        for position, entry in enumerate(entries):
            assert entry.entry_index == snapshot.entry_index + 1 + position, "log has a gap"
        self.snapshot = snapshot
        self._entries: list[Entry] = list(entries)
        last = self.last_index
        assert snapshot.entry_index <= committed_index <= last, (committed_index, last)
        self.committed_index = committed_index
        self.applied_index = snapshot.entry_index
        self.stable_index = last
        self.pending_snapshot: Snapshot | None = None  # installed from a leader, not yet persisted

    # -- reading ---------------------------------------------------------------------------

    @property
    def first_index(self) -> int:
        return self.snapshot.entry_index + 1

    @property
    def last_index(self) -> int:
        return self.snapshot.entry_index + len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.snapshot.term

    def term_at(self, entry_index: int) -> int | None:
        """The term of the entry, or None if it is compacted away or beyond the end."""
        if entry_index == self.snapshot.entry_index:
            return self.snapshot.term
        if self.snapshot.entry_index < entry_index <= self.last_index:
            return self._entries[entry_index - self.first_index].term
        return None

    def match_term(self, entry_index: int, term: int) -> bool:
        return self.term_at(entry_index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Whether a log ending at (last_index, last_term) is at least as new as ours (§5.4.1)."""
        return (last_term, last_index) >= (self.last_term, self.last_index)

    def entries_from(self, low: int, count_max: int) -> list[Entry]:
        """Entries [low, low + count_max) that exist; `low` must not be compacted."""
        assert low >= self.first_index, (low, self.first_index)
        start = low - self.first_index
        return self._entries[start:start + count_max]

    def all_entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries)

    def unstable_entries(self) -> list[Entry]:
        if self.stable_index >= self.last_index:
            return []
        return self.entries_from(max(self.stable_index + 1, self.first_index), len(self._entries))

    def next_committed(self, count_max: int) -> list[Entry]:
        """Committed entries not yet handed out for applying (at most `count_max`)."""
        high = min(self.committed_index, self.last_index)
        if self.pending_snapshot is not None or self.applied_index >= high:
            return []
        return self.entries_from(self.applied_index + 1, min(count_max, high - self.applied_index))

    def find_conflict_by_term(self, entry_index: int, term: int) -> int:
        """The largest index <= `entry_index` whose term is <= `term` (or the snapshot index)."""
        index = min(entry_index, self.last_index)
        while index > self.snapshot.entry_index:
            entry_term = self.term_at(index)
            assert entry_term is not None
            if entry_term <= term:
                break
            index -= 1
        return index

    # -- changing --------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Append, overwriting from entries[0] on when it is within the log (a conflict)."""
        if not entries:
            return
        first = entries[0].entry_index
        assert self.first_index <= first <= self.last_index + 1, (first, self.last_index)
        assert first > self.committed_index, (
            f"truncating at {first} would drop committed entries (commit {self.committed_index})"
        )
        del self._entries[first - self.first_index:]
        self._entries.extend(entries)
        self.stable_index = min(self.stable_index, first - 1)

    def maybe_append(
        self, prev_index: int, prev_term: int, commit_index: int, entries: Sequence[Entry]
    ) -> int | None:
        """AppendEntries receiver rules (§5.3): the index of the last new entry, or None.

        Only entries that conflict (same index, different term) are replaced, with everything
        after them; entries already present are left alone, so a stale or duplicated request
        never shortens the log.
        """
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = prev_index + len(entries)
        for position, entry in enumerate(entries):
            existing = self.term_at(entry.entry_index)
            if existing is None and entry.entry_index <= self.snapshot.entry_index:
                continue  # compacted here: it is committed, so it matches
            if existing != entry.term:
                self.append(entries[position:])
                break
        self.commit_to(min(commit_index, last_new))
        return last_new

    def commit_to(self, entry_index: int) -> bool:
        """Raise the commit index (never lowers it). Returns whether it moved."""
        if entry_index <= self.committed_index:
            return False
        assert entry_index <= self.last_index, (entry_index, self.last_index)
        self.committed_index = entry_index
        return True

    def stable_to(self, entry_index: int) -> None:
        self.stable_index = max(self.stable_index, min(entry_index, self.last_index))

    def applied_to(self, entry_index: int) -> None:
        assert self.applied_index <= entry_index <= self.committed_index, (
            self.applied_index, entry_index, self.committed_index,
        )
        self.applied_index = entry_index

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole log with a leader's snapshot (it holds entries we do not)."""
        assert snapshot.entry_index > self.committed_index
        self.snapshot = snapshot
        self._entries = []
        self.committed_index = snapshot.entry_index
        self.stable_index = snapshot.entry_index
        self.pending_snapshot = snapshot

    def snapshot_persisted(self) -> None:
        assert self.pending_snapshot is not None
        self.applied_index = self.pending_snapshot.entry_index
        self.pending_snapshot = None

    def compact(self, snapshot: Snapshot) -> None:
        """Drop entries covered by a snapshot of our own applied state."""
        index = snapshot.entry_index
        assert self.snapshot.entry_index < index <= self.applied_index, (index, self.applied_index)
        assert index <= self.stable_index, (index, self.stable_index)
        assert self.term_at(index) == snapshot.term
        del self._entries[:index - self.first_index + 1]
        self.snapshot = snapshot
