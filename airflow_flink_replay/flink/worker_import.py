"""Import a job definition's code the way Flink's Python worker does, where PyFlink refuses a Java gateway.

The deserializer, the key selector and the output serializer of an
:class:`~airflow_flink_replay.flink.agent_job.AgentJob` run in Flink's Python worker (the Beam harness of the
source/key step and of the output step), not in the client that built the job. The worker gets them pickled
(cloudpickle, as PyFlink ships them) and unpickling imports the modules they live in — the job definition's
module when they are defined there. In that worker PyFlink sets ``PYFLINK_GATEWAY_DISABLED``, and
``pyflink.java_gateway.launch_gateway`` raises "It's launching the PythonGatewayServer during Python UDF
execution which is unexpected". A module that starts the gateway while it is imported — e.g. one importing
``flink_agents.api.core_options`` (``AgentExecutionOptions``, ``AgentConfigOptions``) or ``flink_agents.plan``
at its top, as the Flink Agents quickstart does — imports fine on the client (the JobManager's PythonDriver
has a gateway) and fails in every task attempt of the job.

:func:`worker_import_failure` reproduces the worker: it pickles those callables here and unpickles them in a
fresh Python (``sys.executable``, this process's ``sys.path``) with ``PYFLINK_GATEWAY_DISABLED`` set and no
gateway port, and returns the Python error as text. The agent operator itself runs in the TaskManager's
embedded interpreter, where a gateway is allowed: the agent's own modules are not the worker's concern.

Never imports Airflow. The child side (:func:`child_main`) imports only what unpickling imports.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from typing import Any

from airflow_flink_replay.core.agent_check import PythonFailure

#: The job definition's fields that Flink's Python worker receives pickled.
WORKER_CALLABLES = ("deserializer", "key_selector", "output_serializer")
#: What marks the child's answer on its stdout (anything the user's modules print is ignored).
ANSWER_MARKER = "afr-worker-import:"
#: How long the child may take (importing Flink Agents alone takes seconds).
CHILD_TIMEOUT_S = 120.0


def worker_environment() -> dict[str, str]:
    """This process's environment as Flink's Python worker has it: no gateway to connect to, none to start, and
    this process's ``sys.path`` (where the job's packages were found)."""
    env = {k: v for k, v in os.environ.items() if k != "PYFLINK_GATEWAY_PORT"}
    env["PYFLINK_GATEWAY_DISABLED"] = "true"
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def worker_import_failure(job: Any, timeout: float = CHILD_TIMEOUT_S) -> PythonFailure | None:
    """The Python error Flink's worker would raise unpickling ``job``'s worker-side callables, or None.

    A callable that cannot even be pickled is reported too (PyFlink could not ship it)."""
    from airflow_flink_replay.flink.agent_check import python_error

    try:
        blob = _pickler().dumps(worker_callables(job))
    except Exception as exc:  # the user's objects: reported, never raised
        return python_error(exc)
    try:
        done = subprocess.run(
            [sys.executable, "-c", f"from {__name__} import child_main; child_main()"],
            input=base64.b64encode(blob), capture_output=True, env=worker_environment(), timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return PythonFailure(type="TimeoutError", message=f"importing the job's code took more than {timeout:g} s")
    for line in reversed(done.stdout.decode(errors="replace").splitlines()):
        if line.startswith(ANSWER_MARKER):
            answer = json.loads(line[len(ANSWER_MARKER) :])
            return PythonFailure.model_validate(answer["error"]) if answer.get("error") else None
    output = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
    return PythonFailure(type="ChildProcessError", message=f"the worker-like Python exited {done.returncode}",
                         traceback="\n".join(output[-40:]))  # fmt: skip


def _pickler() -> Any:
    """cloudpickle, as PyFlink pickles functions; the standard pickle where it is absent (it imports a
    module-level function's module by reference the same way)."""
    try:
        import cloudpickle
    except ImportError:  # not a PyFlink installation (the Airflow side's tests)
        import pickle

        return pickle
    return cloudpickle


def worker_callables(job: Any) -> dict[str, Any]:
    """What Flink's Python workers unpickle of ``job``: its :data:`WORKER_CALLABLES`; of a pipeline also every
    stage's key selector, function, window assigner and output serializer."""
    out = {name: getattr(job, name) for name in WORKER_CALLABLES}
    for stage in getattr(job, "stages", ()):
        for name in ("key_selector", "function", "assigner", "output_serializer"):
            if hasattr(stage, name):
                out[f"{stage.name}.{name}"] = getattr(stage, name)
        if hasattr(stage, "job"):
            out |= {f"{stage.name}.{name}": getattr(stage.job, name) for name in ("key_selector", "output_serializer")}
    return out


def child_main() -> None:
    """The worker side: unpickle the callables read from stdin (base64) and print the outcome after the marker."""
    error = None
    try:
        _pickler().loads(base64.b64decode(sys.stdin.buffer.read()))
    except BaseException as exc:  # a module that exits at import is reported like one that raises
        from airflow_flink_replay.flink.agent_check import python_error

        error = python_error(exc.with_traceback(exc.__traceback__.tb_next if exc.__traceback__ else None)).model_dump()
    print(ANSWER_MARKER + json.dumps({"error": error}), flush=True)
