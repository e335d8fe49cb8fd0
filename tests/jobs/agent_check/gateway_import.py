"""A job definition module that imports Flink Agents' options at module level, as the quickstart's example does
(issue 48): ``flink_agents.api.core_options`` starts PyFlink's Java gateway while it is imported.

On the client (the JobManager's PythonDriver) that is legal. Flink's Python worker for the source/key step
imports this module too — the key selector below lives here, and the worker unpickles it — and there PyFlink
refuses to start a gateway ("It's launching the PythonGatewayServer during Python UDF execution which is
unexpected"): every task attempt fails, and the job fails after its restarts. ``flink-replay deploy`` must say
so, and the agent check must refuse the definition before production is stopped.

Options given by key (``config={"num-async-threads": 2}``) need no such import.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flink_agents.api.core_options import AgentExecutionOptions

from .definitions import healthy


def customer_key(review: dict[str, Any]) -> str:
    """The review's customer: the key selector, run by Flink's Python worker (which imports this module)."""
    return str(review["customer"])


job = dataclasses.replace(healthy, key_selector=customer_key, config={AgentExecutionOptions.NUM_ASYNC_THREADS: 2})
