"""The Flink Agents quickstart's multi-agent workflow (``workflow_multiple_agent_example`` of the flink-agents
0.2.0 wheel) as a user's pipeline would bring it: job definitions (``job.py``: the review analysis agent, a
keyed window aggregating its results per product, the product suggestion agent) and a deterministic stand-in
for its Ollama server that answers both agents' prompts (``stand_in.py``). Nothing of the quickstart is copied
or edited."""
