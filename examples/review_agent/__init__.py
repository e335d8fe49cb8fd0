"""Example Flink Agents (0.2.0 API) review-triage agent used by the tests and the demo.

Layout:

- ``common/``: what both versions share — the local stand-in chat model connection
  (:class:`~examples.review_agent.common.chat_model.StandInReviewModel`: deterministic, or sampling like an
  LLM at a temperature; its decision is ``common/decision.py``), the side-effecting
  ``notify_support`` tool, the Mem0-backed long-term memory resource and the review event generator.
- ``common/triage.py``: what the agent does (count, recall, ask the model, remember, emit), shared by every
  version as module-level functions.
- ``v1/`` and ``v2/``: the two agent builds (same module layout, ``agent.py`` + ``prompts.py``); v2 changes
  only the prompt. Each ``agent.py`` declares the agent class (Flink Agents reads actions and resources from
  the class's own ``__dict__``, so v2 cannot subclass v1's) and delegates to ``common/triage.py``.
  ``vN/job.py`` is the version's job definition (``"examples.review_agent.v1.job:job"``, an ``AgentJob`` built by
  :func:`examples.review_agent.common.job.review_job`: dict input keyed by the ``customer`` text, the Mem0
  ``review_memory`` resource bound to the run's store). ``build_agent`` in ``vN/agent.py`` is the same agent as
  an agent factory (the older form, still accepted).

What v2 changes (asserted by the tests and the demo; :func:`examples.review_agent.common.generator.v2_changes_label`):
reviews with ``rating == 3`` whose text contains ``"late delivery"`` (case-insensitive) are labelled
``"negative"`` by v2 instead of ``"neutral"``, and v2 therefore also calls ``notify_support`` for them. All
other reviews get identical outputs from v1 and v2.

Agent config ``review-agent.extra-rules`` (lines of the same rule form) is appended to the system prompt of
either version: a prompt change without a code change, which keeps the action identity (used by the
action-state hazard test). Run the production job with ``airflow_flink_replay/flink/production_job.py
--agent-job examples.review_agent.v1.job:job ...`` and generate input with
:func:`examples.review_agent.common.generator.produce_reviews`.
"""
