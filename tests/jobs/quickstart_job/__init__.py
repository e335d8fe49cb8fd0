"""The Flink Agents quickstart's ``ReviewAnalysisAgent`` (shipped in the flink-agents 0.2.0 wheel) as a
user's job would bring it: job definitions (``job.py``) and a deterministic stand-in for its Ollama server
(``stand_in.py``). Nothing of the quickstart is copied or edited; docs/your-agent.md shows these files."""
