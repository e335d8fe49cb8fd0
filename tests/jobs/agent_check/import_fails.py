"""A job definition module that raises at import (the agent check must show this error's text and line)."""

from __future__ import annotations

IMPORT_ERROR = "cannot reach the feature store at import time"

raise ImportError(IMPORT_ERROR)
