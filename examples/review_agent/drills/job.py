"""The job definition of the crashing drill candidate (``"examples.review_agent.drills.job:job"``)."""

from __future__ import annotations

from examples.review_agent.common.job import review_job

from .agent import CrashingReviewAgent

job = review_job(CrashingReviewAgent)
