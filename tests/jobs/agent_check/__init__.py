"""Job definitions the agent check must refuse or explain (test-only; the healthy ones reuse the examples)."""
