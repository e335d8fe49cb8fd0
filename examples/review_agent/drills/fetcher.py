"""An agent whose action makes a raw HTTP request itself, outside every resource (an "unmediated" call).

Each input names the URL to ask (``lookup_url``); the action GETs ``<lookup_url>?id=<review id>&ns=<job
identifier>`` with ``requests`` and outputs what came back. The unmediated-call drill runs it as production
and replays it: the replay's guard must see the request, and block it when the policy says so, while
production's requests on the same TaskManager go through.
"""

from __future__ import annotations

import json
from typing import Any

import requests
from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.runner_context import RunnerContext

from airflow_flink_replay.flink.agent_job import AgentJob, FieldKey, json_object


class LookupAgent(Agent):
    """Looks each review up over HTTP, directly (no tool, no resource)."""

    @action(InputEvent)
    @staticmethod
    def look_up(event: InputEvent, ctx: RunnerContext) -> None:
        """GET the review's lookup URL and output the answer."""
        raw = event.input
        review: dict[str, Any] = json.loads(raw) if isinstance(raw, str | bytes) else dict(raw)
        params = {"id": review["id"], "ns": ctx.config.get_str("job-identifier") or ""}
        answer = requests.get(review["lookup_url"], params=params, timeout=10)
        ctx.send_event(
            OutputEvent(output={"id": review["id"], "customer": review["customer"], "looked_up": answer.text})
        )


#: The drill's job definition (``"examples.review_agent.drills.fetcher:job"``).
job = AgentJob(agent=LookupAgent, key_selector=FieldKey("customer"), key_type="string", deserializer=json_object)
