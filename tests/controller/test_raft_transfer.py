"""Leadership transfer (Raft thesis §3.10): TimeoutNow, as the controller's SIGTERM uses it.

Goal: a leader hands its role to a follower in one round trip, not an election timeout; it
takes no proposal meanwhile; a lagging target is brought up to date first; a transfer whose
target is gone gives up after an election timeout and the leader serves again; a vote asked
on a TimeoutNow gets past leader stickiness, an ordinary one does not. Method: the hand-driven
cluster of tests/controller/cluster.py (every tick and delivery chosen by the test).
"""

from __future__ import annotations

from controller.raft import (
    ProposeStatus,
    Role,
    TimeoutNow,
    VoteRequest,
    decode_message,
    encode_message,
)
from tests.controller.cluster import Cluster


def test_3_10_the_leader_hands_over_without_an_election_timeout() -> None:
    cluster = Cluster(3)
    leader = cluster.elect(1)
    cluster.propose(1, b"a")
    term = leader.term
    assert leader.transfer_leadership(3) == 3
    cluster.process(1)
    cluster.deliver()  # no tick passes: the election is the TimeoutNow's, not a timeout's
    assert cluster.leaders() == [3]
    assert cluster.nodes[3].term == term + 1
    assert all(cluster.nodes[n].leader_id == 3 for n in cluster.ids if n != 3)
    assert any(isinstance(m, TimeoutNow) and m.to_id == 3 for m in cluster.sent)
    cluster.propose(3, b"b")
    assert all(cluster.commands(n) == [b"a", b"b"] for n in cluster.ids)


def test_3_10_a_lagging_target_catches_up_first_and_no_proposal_is_taken_meanwhile() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    cluster.cut(1, 3)
    for data in (b"a", b"b"):
        cluster.propose(1, data)
    assert cluster.commands(3) == []
    assert cluster.nodes[1].transfer_leadership(3) == 3
    cluster.process(1)
    assert cluster.nodes[1].propose(b"late").status is ProposeStatus.DROPPED
    assert not any(isinstance(m, TimeoutNow) for m in cluster.sent)  # 3 lacks entries
    cluster.heal()
    cluster.tick(1, only=[1])  # the heartbeat finds 3 behind; the appends bring it up
    assert cluster.leaders() == [3]
    timeout_now = [m for m in cluster.sent if isinstance(m, TimeoutNow)]
    assert len(timeout_now) == 1  # one election, one new term
    cluster.tick(1)
    assert cluster.commands(3)[:2] == [b"a", b"b"]


def test_3_10_a_transfer_to_a_gone_follower_gives_up_and_the_leader_serves_again() -> None:
    cluster = Cluster(3, election_timeout_ticks=10)
    leader = cluster.elect(1)
    cluster.isolate(3)
    assert leader.transfer_leadership(3) == 3
    cluster.process(1)
    assert leader.propose(b"x").status is ProposeStatus.DROPPED
    cluster.tick(9, only=[1, 2])
    assert leader.transfer_to == 3
    cluster.tick(1, only=[1, 2])
    assert leader.role is Role.LEADER and leader.transfer_to is None
    assert leader.propose(b"x").status is ProposeStatus.ACCEPTED


def test_3_10_who_is_a_target() -> None:
    cluster = Cluster(3)
    leader = cluster.elect(2)
    assert leader.transfer_leadership(2) is None  # itself
    assert leader.transfer_leadership(9) is None  # not a peer
    assert cluster.nodes[1].transfer_leadership(3) is None  # not the leader
    cluster.cut(2, 3)
    cluster.propose(2, b"a")
    assert leader.transfer_leadership() == 1  # the best: 1 holds the longest log
    assert Cluster(1).elect(1).transfer_leadership() is None  # nobody to hand to


def test_a_vote_on_a_timeout_now_passes_leader_stickiness_and_an_ordinary_one_does_not() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    node = cluster.nodes[2]
    term, last = node.term, node.log.last_index
    node.step(VoteRequest(3, 2, term + 1, False, last, term))
    cluster.process(2)
    assert node.term == term  # sticky: it heard the leader lately
    node.step(VoteRequest(3, 2, term + 1, False, last, term, True))
    cluster.process(2)
    assert (node.term, node.voted_for) == (term + 1, 3)


def test_a_stale_timeout_now_is_ignored() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    node = cluster.nodes[2]
    node.step(TimeoutNow(1, 2, node.term - 1))
    cluster.process(2)
    assert node.role is Role.FOLLOWER and node.term == cluster.nodes[1].term


def test_the_codec_carries_timeout_now_and_reads_an_older_vote_request() -> None:
    message = TimeoutNow(1, 2, 7)
    assert decode_message(encode_message(message)) == message
    vote = VoteRequest(1, 2, 7, False, 3, 6, True)
    assert decode_message(encode_message(vote)) == vote
    older = encode_message(VoteRequest(1, 2, 7, False, 3, 6)).replace(b',"transfer":false', b"")
    assert b"transfer" not in older
    assert decode_message(older) == VoteRequest(1, 2, 7, False, 3, 6, False)
