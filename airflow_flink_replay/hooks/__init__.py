"""Hooks: one per external system (Flink REST, Mem0). Kafka goes through the Kafka provider's hooks."""
