"""The StreamExecutionEnvironment for agent jobs.

Flink Agents runs actions in an embedded (pemja) interpreter inside the TaskManager. That interpreter is
started from the base Python, so a virtualenv's site-packages (pemja, flink_agents, this package) are only
visible when they are on its PYTHONPATH: we set ``python.pythonpath`` to the site-packages of the Python
that runs the job program (``python.client.executable``, the same venv as ``python.executable`` on these
hosts); a ``python.pythonpath`` passed in ``conf`` is kept in front of it.
"""

from __future__ import annotations

import sysconfig
from typing import Any


def site_packages() -> str:
    """site-packages (purelib and platlib) of the running interpreter, as a PYTHONPATH string."""
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    return ":".join(sorted(paths))


def job_environment(conf: dict[str, str] | None = None) -> Any:
    """``StreamExecutionEnvironment`` with ``python.pythonpath`` set (see the module docstring) and ``conf``."""
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    config = Configuration()
    values = dict(conf or {})
    given = values.get("python.pythonpath")
    values["python.pythonpath"] = f"{given}:{site_packages()}" if given else site_packages()
    for key, value in values.items():
        config.set_string(key, str(value))
    return StreamExecutionEnvironment.get_execution_environment(config)
