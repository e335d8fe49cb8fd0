"""The ``notify_support`` side effect: a support ticket written as a JSON file into an inbox directory.

The inbox is ``$REVIEW_AGENT_SUPPORT_INBOX`` (default ``<tmp>/review-agent-support-inbox``); one file per
review id. A replay policy of ``record`` must keep this file from being written; ``allow`` writes it.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path


def support_inbox() -> Path:
    """The directory tickets are written to."""
    default = Path(tempfile.gettempdir()) / "review-agent-support-inbox"
    return Path(os.environ.get("REVIEW_AGENT_SUPPORT_INBOX") or default)


def ticket_path(review_id: str) -> Path:
    """Where the ticket for ``review_id`` lands."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in review_id)
    return support_inbox() / f"{safe}.json"


def notify_support(review_id: str, customer: str, reason: str) -> str:
    """Open a support ticket for a bad review (writes ``<inbox>/<review_id>.json``); returns the ticket id."""
    path = ticket_path(review_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    ticket = {"ticket": f"T-{review_id}", "review_id": review_id, "customer": customer, "reason": reason,
              "created": time.time()}
    path.write_text(json.dumps(ticket), encoding="utf-8")
    return ticket["ticket"]
