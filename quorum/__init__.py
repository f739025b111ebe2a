"""pykraft's metadata quorum: the Raft core, the durable metadata log, the controller node."""
