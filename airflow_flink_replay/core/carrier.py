"""Text a job-side program sends back through a job graph.

A Python program that runs on the JobManager (REST ``POST /jars/{id}/plan``) has no channel back to the
caller but the job graph the call returns. Such programs put what they found in the name of a no-op operator:
a marker, then the payload as URL-safe base64 of its zlib-compressed UTF-8 (it survives the HTML escaping of
a plan's descriptions). The same text printed on stdout serves the CLI path. Pure: standard library only.
"""

from __future__ import annotations

import base64
import re
import zlib

__all__ = ["carried", "encode_carried"]


def encode_carried(marker: str, payload: str) -> str:
    """``marker`` followed by ``payload`` compressed and base64-encoded (URL-safe)."""
    return marker + base64.urlsafe_b64encode(zlib.compress(payload.encode(), 9)).decode()


def carried(marker: str, text: str) -> str | None:
    """The payload behind ``marker`` anywhere in ``text`` (a plan's JSON, a program's output), or None."""
    match = re.search(re.escape(marker) + r"([A-Za-z0-9_=-]+)", text)
    if match is None:
        return None
    return zlib.decompress(base64.urlsafe_b64decode(match.group(1))).decode()
