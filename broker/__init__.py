"""The broker node (planned): metadata observer, partition replicas and logs, Kafka client APIs."""
