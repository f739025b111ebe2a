"""The broker node: metadata observer, partition replicas and their logs, Kafka client APIs."""
