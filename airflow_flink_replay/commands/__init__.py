"""Sub-commands of ``flink-replay``: each module has ``add_parser(subparsers)``."""
