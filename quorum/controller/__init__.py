"""The active controller's decision logic: pure functions on plain values (no image, no IO).

What drives them on the Raft leader (a RaftNode, the wire codec) is in quorum/node/:
active_controller.py and controller_apis.py (tests/unit/test_quorum_rooms.py keeps it so)."""
