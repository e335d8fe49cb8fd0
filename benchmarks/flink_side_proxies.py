"""Benchmark: cost of the replay policy proxies per resource call (Flink-side venv, no Flink job).

Builds the review agent's plan, rewrites it with the policy proxies, loads it back from JSON (as the
TaskManager does) and times N calls of the ``notify_support`` tool under ``record`` (audited, not executed)
and under ``allow`` (audited + executed), against N direct calls of the tool function.

    .stack/flink-venv/bin/python benchmarks/flink_side_proxies.py [--n 5000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=5000)
    n = parser.parse_args().n
    tmp = tempfile.mkdtemp(prefix="afr-bench-proxies-")
    os.environ["REVIEW_AGENT_SUPPORT_INBOX"] = os.path.join(tmp, "inbox")

    from flink_agents.api.resource import ResourceType
    from flink_agents.plan.agent_plan import AgentPlan
    from flink_agents.plan.configuration import AgentConfiguration

    from airflow_flink_replay.core.policy import ReplayPolicy
    from airflow_flink_replay.flink.proxies import rewrite_plan_resources
    from examples.review_agent.common.tools import notify_support
    from examples.review_agent.v1.agent import build_agent

    def tool(policy: dict, variant: str):
        plan = AgentPlan.from_agent(build_agent(), AgentConfiguration())
        rewrite_plan_resources(plan, ReplayPolicy.model_validate(policy), variant, os.path.join(tmp, "audit"))
        loaded = AgentPlan.model_validate_json(plan.model_dump_json(serialize_as_any=True))
        return loaded.get_resource("notify_support", ResourceType.TOOL)

    def timed(label: str, fn) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            fn(review_id=f"r-{i}", customer="c-1", reason="late delivery")
        dt = time.perf_counter() - t0
        print(f"{label:<22} {n} calls  {dt:6.2f} s  {1e6 * dt / n:8.1f} us/call")
        return dt

    direct = timed("direct tool function", notify_support)
    rec = timed("proxy, record", tool({}, "bench-record").call)
    allow = timed("proxy, allow", tool({"by_name": {"notify_support": "allow"}}, "bench-allow").call)
    print(f"overhead per call: record {1e6 * rec / n:.1f} us, allow {1e6 * (allow - direct) / n:.1f} us "
          f"(audit line + policy lookup); work dir {tmp}")


if __name__ == "__main__":
    main()
