"""The provider's Airflow UI plugin (served by the API server): a replay run's reports behind Airflow's login and
DAG permissions, and the Replays pages (every production's runs, charts over time, two runs side by side).

Import-free, like the other packages: :mod:`.plugin` registers the plugin, :mod:`.app` builds the FastAPI app,
:mod:`.paths` holds the URL scheme (the comparison's extra link uses it on the worker). docs/ui.md says what is
served and how access is decided.
"""
