"""The job definition of the review agent v2 (``"examples.review_agent.v2.job:job"``).

Production runs it with ``production_job.py --agent-job examples.review_agent.v2.job:job``, a replay
spec names it as ``production.agent_job`` or ``candidate_agent_job``. The agent is imported relatively so
that a replay's content-hashed copy of this package runs this version's own code.
"""

from __future__ import annotations

from examples.review_agent.common.job import NOISY_MODEL, review_job

from .agent import ReviewAgent

job = review_job(ReviewAgent)

#: The same job with the stand-in chat model sampling like an LLM (``...job:noisy_job``).
noisy_job = review_job(ReviewAgent, NOISY_MODEL)
