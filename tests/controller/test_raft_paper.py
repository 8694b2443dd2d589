"""Raft core scenarios, named after the sections of the Raft paper (and thesis) they check.

Method: a hand-driven cluster (tests/controller/cluster.py) where the test chooses every tick,
delivery and cut, so each rule is exercised on purpose; assertions look at roles, terms, logs,
what was persisted and what was applied.
"""

from __future__ import annotations

import pytest

from controller.raft import (
    AppendRequest,
    Entry,
    EntryKind,
    HardState,
    ProposeStatus,
    RaftConfig,
    RaftNode,
    Role,
    VoteRequest,
    VoteResponse,
)
from tests.controller.cluster import Cluster


def test_5_2_a_follower_times_out_and_one_leader_is_elected() -> None:
    cluster = Cluster(3)
    cluster.tick(30)
    assert len(cluster.leaders()) == 1
    leader = cluster.nodes[cluster.leaders()[0]]
    assert all(cluster.nodes[n].leader_id == leader.node_id for n in cluster.ids)
    assert all(cluster.nodes[n].term == leader.term for n in cluster.ids)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_5_2_clusters_of_one_three_five_elect_and_commit(size: int) -> None:
    cluster = Cluster(size)
    cluster.tick(40)
    [leader_id] = cluster.leaders()
    cluster.propose(leader_id, b"x")
    cluster.tick(2)
    assert all(cluster.commands(n) == [b"x"] for n in cluster.ids)


def test_5_2_a_voter_grants_one_vote_per_term_and_persists_it_first() -> None:
    node = RaftNode(RaftConfig(node_id=1, voter_ids=(1, 2, 3)), __import__("random").Random(1))
    node.step(VoteRequest(2, 1, 5, False, 0, 0))
    ready = node.ready()
    assert ready.hard_state == HardState(term=5, voted_for=2, commit_index=0)
    assert ready.messages == (VoteResponse(1, 2, 5, False, True),)
    node.advance(ready)
    node.step(VoteRequest(3, 1, 5, False, 0, 0))
    ready = node.ready()
    assert ready.messages == (VoteResponse(1, 3, 5, False, False),)
    node.advance(ready)
    node.step(VoteRequest(2, 1, 5, False, 0, 0))  # a retry of the granted request
    assert node.ready().messages == (VoteResponse(1, 2, 5, False, True),)


def test_5_2_a_restarted_voter_remembers_its_vote() -> None:
    cluster = Cluster(3)
    cluster.nodes[1].step(VoteRequest(2, 1, 7, False, 0, 0))
    cluster.process(1)
    cluster.restart(1)
    cluster.nodes[1].step(VoteRequest(3, 1, 7, False, 0, 0))
    cluster.process(1)
    answers = [m for m in cluster.sent if isinstance(m, VoteResponse) and m.from_id == 1]
    assert [(m.to_id, m.granted) for m in answers] == [(2, True), (3, False)]


def test_5_3_entries_commit_on_a_majority_and_apply_in_order() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.cut(1, 3)
    for data in (b"a", b"b", b"c"):
        cluster.propose(1, data)
    cluster.tick(1)
    assert cluster.commands(1) == [b"a", b"b", b"c"]
    assert cluster.commands(2) == [b"a", b"b", b"c"]
    assert cluster.commands(3) == []
    cluster.heal()
    cluster.tick(3)
    assert cluster.commands(3) == [b"a", b"b", b"c"]


def test_5_3_a_new_leader_appends_a_noop_at_the_start_of_its_term() -> None:
    cluster = Cluster(3)
    leader = cluster.elect(2)
    last = leader.log.all_entries()[-1]
    assert (last.kind, last.term) == (EntryKind.NOOP, leader.term)


def test_5_3_conflicting_entries_are_replaced_and_the_rest_kept() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"committed")
    cluster.tick(1)
    cluster.isolate(1)
    for data in (b"lost-1", b"lost-2"):  # only node 1 has these (term 1)
        cluster.propose(1, data)
    cluster.heal()
    cluster.cut(1, 2)
    cluster.cut(1, 3)
    cluster.elect(2)
    cluster.propose(2, b"new")
    cluster.heal()
    cluster.tick(5)
    for node_id in cluster.ids:
        assert cluster.commands(node_id) == [b"committed", b"new"]
    terms = [e.term for e in cluster.nodes[1].log.all_entries()]
    assert terms == [e.term for e in cluster.nodes[2].log.all_entries()]


def test_5_3_a_stale_duplicate_append_never_shortens_the_log() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    for data in (b"a", b"b"):
        cluster.propose(1, data)
    follower = cluster.nodes[2]
    last_before = follower.log.last_index
    old = next(m for m in cluster.sent if isinstance(m, AppendRequest) and m.to_id == 2
               and m.entries)
    follower.step(old)  # delivered again, late
    cluster.process(2)
    assert follower.log.last_index == last_before


def test_5_3_truncating_below_the_commit_index_is_refused() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"a")
    cluster.tick(1)
    follower = cluster.nodes[2]
    committed = follower.log.committed_index
    forged = Entry(committed, follower.term + 5, EntryKind.NORMAL, b"evil")
    with pytest.raises(AssertionError, match="committed"):
        follower.log.append([forged])


def test_5_4_1_a_candidate_with_an_older_log_cannot_win() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.cut(1, 3)
    cluster.propose(1, b"a")  # on 1 and 2 only
    cluster.isolate(1)
    cluster.nodes[3].campaign()
    cluster.process(3)
    cluster.deliver()
    assert cluster.nodes[3].role is not Role.LEADER
    cluster.elect(2)


def test_5_4_2_a_majority_holding_an_old_term_entry_does_not_commit_it() -> None:
    """Figure 8: commit by counting replicas only for entries of the leader's own term."""
    cluster = Cluster(3, append_entries_max=1, inflight_entries_max=1)
    old = [Entry(1, 1, EntryKind.NORMAL, b"t1"), Entry(2, 2, EntryKind.NORMAL, b"t2-old")]
    for node_id, entries in ((1, old), (2, old[:1]), (3, old[:1])):
        cluster.storages[node_id].entries = list(entries)
        cluster.storages[node_id].hard_state = HardState(term=2, voted_for=None, commit_index=1)
        cluster.restart(node_id)
    cluster.isolate(3)
    leader = cluster.nodes[1]
    leader.campaign()
    cluster.process(1)
    commits = []
    while cluster.queue:
        message = cluster.queue.pop(0)
        if (message.from_id, message.to_id) in cluster.cuts:
            continue
        cluster.nodes[message.to_id].step(message)
        cluster.process(message.to_id)
        commits.append(leader.log.committed_index)
    assert leader.role is Role.LEADER and leader.term == 3
    # Node 2 acknowledged entry 2 (term 2) before the no-op: 2 of 3 held it, yet the commit
    # index jumped from 1 straight to the no-op at 3.
    assert 2 not in commits and commits[-1] == 3
    assert cluster.commands(2) == [b"t1", b"t2-old"]


def test_6_4_read_index_waits_for_a_majority_heartbeat_round() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.propose(1, b"a")
    cluster.isolate(1)
    assert cluster.nodes[1].read_index(42).status is ProposeStatus.ACCEPTED
    cluster.process(1)
    cluster.deliver()
    assert cluster.reads[1] == []  # no majority confirmed it is still the leader
    cluster.heal()
    cluster.nodes[1].read_index(43)
    cluster.process(1)
    cluster.deliver()
    assert [r.request_id for r in cluster.reads[1]] == [42, 43]
    assert all(r.entry_index >= cluster.nodes[1].log.last_index for r in cluster.reads[1])


def test_6_4_read_index_on_a_follower_says_not_leader() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    result = cluster.nodes[2].read_index(1)
    assert (result.status, result.leader_id) == (ProposeStatus.NOT_LEADER, 1)


def test_6_4_a_deposed_leader_never_answers_a_read() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.isolate(1)
    cluster.elect(2)
    cluster.propose(2, b"newer")
    cluster.nodes[1].read_index(7)  # node 1 still believes it leads
    cluster.process(1)
    cluster.deliver()
    assert cluster.reads[1] == []


def test_7_a_lagging_follower_gets_the_snapshot() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.isolate(3)
    for number in range(10):
        cluster.propose(1, b"c%d" % number)
    cluster.tick(1)
    for node_id in (1, 2):
        node = cluster.nodes[node_id]
        node.compact(node.log.applied_index, b"state@%d" % node.log.applied_index)
        cluster.storages[node_id].compact(node.log.snapshot)
    assert cluster.nodes[1].log.first_index > 2
    cluster.heal()
    cluster.tick(4)
    lagging = cluster.nodes[3]
    assert lagging.log.snapshot.entry_index == cluster.nodes[1].log.snapshot.entry_index
    assert cluster.applied[3][0].data == cluster.nodes[1].log.snapshot.data
    cluster.propose(1, b"after")
    cluster.tick(1)
    assert cluster.commands(3)[-1] == b"after"
    cluster.restart(3)  # restart from the installed snapshot plus later entries
    cluster.tick(3)
    assert cluster.nodes[3].log.committed_index == cluster.nodes[1].log.committed_index


def test_9_6_pre_vote_keeps_a_rejoining_node_from_raising_terms() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    term = cluster.nodes[1].term
    cluster.isolate(3)
    cluster.tick(60)  # node 3 keeps timing out alone
    assert cluster.nodes[3].term == term
    cluster.heal()
    cluster.tick(5)
    assert cluster.leaders() == [1] and cluster.nodes[1].term == term


def test_9_6_without_pre_vote_a_rejoining_node_disrupts() -> None:
    """The contrast for the test above: the mechanism, not luck, keeps the term."""
    cluster = Cluster(3, pre_vote=False, check_quorum=False)
    cluster.elect(1)
    term = cluster.nodes[1].term
    cluster.isolate(3)
    cluster.tick(60)
    assert cluster.nodes[3].term > term
    cluster.heal()
    cluster.tick(5)
    assert cluster.nodes[1].term > term


def test_check_quorum_an_isolated_leader_steps_down_and_refuses_writes() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.isolate(1)
    cluster.tick(25, only=[1])
    assert cluster.nodes[1].role is Role.FOLLOWER
    assert cluster.nodes[1].propose(b"x").status is ProposeStatus.NOT_LEADER


def test_leader_stickiness_a_follower_with_a_live_leader_ignores_candidates() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    term = cluster.nodes[2].term
    cluster.nodes[2].step(VoteRequest(3, 2, term + 1, False, 99, term))
    cluster.process(2)
    assert cluster.nodes[2].term == term and cluster.nodes[2].voted_for != 3


def test_proposals_beyond_the_uncommitted_limit_are_dropped() -> None:
    cluster = Cluster(3, uncommitted_entries_max=3)
    cluster.elect(1)
    cluster.isolate(1)
    statuses = [cluster.nodes[1].propose(b"p").status for _ in range(5)]
    assert ProposeStatus.DROPPED in statuses
    assert statuses[0] is ProposeStatus.ACCEPTED
