"""What the coordinators (groups in `broker.group`, transactions in `broker.txn`) share: the
partition host over the replica manager, loading a partition from its log, leadership
changes, the append queue and the creation of their internal topics."""
