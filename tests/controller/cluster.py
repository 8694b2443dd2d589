"""A hand-driven Raft cluster for scenario tests: no randomness in the network, explicit steps.

Nodes persist into MemoryRaftStorage and apply into a list; messages wait in one FIFO queue
until a test delivers them, so a test decides exactly what each node sees. `cut(a, b)` drops
messages between two nodes in both directions.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from controller.raft import (
    Entry,
    EntryKind,
    MemoryRaftStorage,
    Message,
    RaftConfig,
    RaftNode,
    ReadState,
    Role,
    save_ready,
)


class Cluster:
    def __init__(self, size: int, *, seed: int = 1, **config: object) -> None:
        self.ids = tuple(range(1, size + 1))
        self.config = config
        self.seed = seed
        self.storages = {node_id: MemoryRaftStorage() for node_id in self.ids}
        self.nodes = {node_id: self._new_node(node_id) for node_id in self.ids}
        self.applied: dict[int, list[Entry]] = {node_id: [] for node_id in self.ids}
        self.reads: dict[int, list[ReadState]] = {node_id: [] for node_id in self.ids}
        self.queue: list[Message] = []
        self.cuts: set[tuple[int, int]] = set()
        self.sent: list[Message] = []

    def _new_node(self, node_id: int) -> RaftNode:
        config = RaftConfig(node_id=node_id, voter_ids=self.ids,
                            **self.config)  # type: ignore[arg-type]
        state = self.storages[node_id].load()
        return RaftNode(config, random.Random(self.seed * 100 + node_id),
                        hard_state=state.hard_state, snapshot=state.snapshot,
                        entries=state.entries)

    def restart(self, node_id: int) -> None:
        """Crash and restart from storage (MemoryRaftStorage keeps what `save` got)."""
        self.queue = [m for m in self.queue if node_id not in (m.to_id, m.from_id)]
        self.nodes[node_id] = self._new_node(node_id)
        self.applied[node_id] = []

    def process(self, node_id: int) -> None:
        node = self.nodes[node_id]
        while node.has_ready():
            ready = node.ready()
            save_ready(self.storages[node_id], ready)
            for message in ready.messages:
                self.sent.append(message)
                if (message.from_id, message.to_id) not in self.cuts:
                    self.queue.append(message)
            if ready.snapshot is not None:
                self.applied[node_id] = [
                    Entry(ready.snapshot.entry_index, ready.snapshot.term, EntryKind.NOOP,
                          ready.snapshot.data)
                ]
            self.applied[node_id].extend(ready.committed)
            self.reads[node_id].extend(ready.read_states)
            node.advance(ready)

    def deliver(self, rounds_max: int = 10_000) -> None:
        for _ in range(rounds_max):
            if not self.queue:
                return
            message = self.queue.pop(0)
            if (message.from_id, message.to_id) in self.cuts:
                continue
            self.nodes[message.to_id].step(message)
            self.process(message.to_id)
        raise AssertionError("messages still flowing after rounds_max deliveries")

    def tick(self, ticks: int = 1, only: Iterable[int] | None = None) -> None:
        for _ in range(ticks):
            for node_id in (only or self.ids):
                self.nodes[node_id].tick()
                self.process(node_id)
            self.deliver()

    def elect(self, node_id: int) -> RaftNode:
        """Make `node_id` campaign now, as if every lease had run out (it must win)."""
        for other in self.ids:
            node = self.nodes[other]
            if other != node_id and node.role is not Role.LEADER:
                node.election_elapsed_ticks = node.config.election_timeout_ticks
        self.nodes[node_id].campaign()
        self.process(node_id)
        self.deliver()
        assert self.nodes[node_id].role is Role.LEADER, self.nodes[node_id].role
        return self.nodes[node_id]

    def propose(self, node_id: int, data: bytes) -> int:
        result = self.nodes[node_id].propose(data)
        self.process(node_id)
        self.deliver()
        return result.entry_index

    def cut(self, a: int, b: int) -> None:
        self.cuts |= {(a, b), (b, a)}

    def isolate(self, node_id: int) -> None:
        for other in self.ids:
            if other != node_id:
                self.cut(node_id, other)

    def heal(self) -> None:
        self.cuts.clear()

    def leaders(self) -> list[int]:
        return [n for n in self.ids if self.nodes[n].role is Role.LEADER]

    def commands(self, node_id: int) -> list[bytes]:
        return [e.data for e in self.applied[node_id] if e.kind is EntryKind.NORMAL]

