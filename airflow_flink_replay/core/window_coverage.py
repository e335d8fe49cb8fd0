"""Has production processed the replay window yet? What a replay's cassette can be trusted for.

Production records its mediated calls to its cassette topic *while* it processes the window's records, after
it resumed from the savepoint. A replay reads the cassette once, when it is submitted; a call production had
not made by then finds no recorded result and is served its fallback (a placeholder), through no fault of the
candidate. So the submission waits, bounded, until production has processed the window: until production's
output topic holds an output for every window record. Outputs are tied to the input record that caused them
by event time: Flink Agents stamps every output with its input record's timestamp, and Flink's Kafka sink
writes it as the record's timestamp (the capture topic holds the input records with their event time).

:func:`records_reached` counts the window records that have an output; :class:`WindowCoverage` is what the
wait found, carried to the comparison: a window that was not covered when the replays read the cassette and
a baseline with calls the cassette did not match make the verdict INCONCLUSIVE (``CASSETTE_INCOMPLETE``),
never a false difference. Pure: pydantic only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from airflow_flink_replay.core.compare.result import ComparisonResult, Reason

__all__ = ["WindowCoverage", "count_times", "records_reached", "with_coverage"]


class WindowCoverage(BaseModel):
    """How far production had processed the window when the replays were given its cassette."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    records: int = Field(ge=0, description="the window's input records (with an event time)")
    reached: int = Field(ge=0, description="window records production had output something for")
    waited_s: float = Field(default=0.0, ge=0.0, description="how long the submission waited for production")
    timeout_s: float = Field(default=0.0, ge=0.0, description="the longest it would have waited")
    note: str = Field(default="", description="why coverage could not be judged, when it could not")

    @property
    def complete(self) -> bool:
        """Whether production had output something for every window record (never when it could not be told)."""
        return self.reached >= self.records and not self.note

    def describe(self) -> str:
        """One line for logs and reasons."""
        if self.note:
            return self.note
        state = f"all {self.records}" if self.complete else f"{self.reached} of {self.records}"
        return (
            f"production had output something for {state} window records when the replays read its cassette, "
            f"after waiting {self.waited_s:.1f} s (at most {self.timeout_s:.0f} s)"
        )


def records_reached(window_times: Mapping[int, int], output_times: Mapping[int, int]) -> int:
    """How many window records production's outputs reach: per event time, as many records as there are
    outputs with that time (records sharing a timestamp are told apart by count only).

    :param window_times: event time (ms) → number of window records with it.
    :param output_times: event time (ms) → number of production outputs with it (any number of other times:
        outputs of records before or after the window are not counted).
    """
    return sum(min(n, output_times.get(t, 0)) for t, n in window_times.items())


def count_times(times: list[int]) -> Counter[int]:
    """Event times → how often each occurs (records without a timestamp, ``<= 0``, left out)."""
    return Counter(t for t in times if t > 0)


def with_coverage(result: ComparisonResult, coverage: WindowCoverage | None,
                  unmatched: Mapping[str, int]) -> ComparisonResult:
    """``result`` judged with what the cassette covered: when production had not processed the whole window
    as the replays read its cassette and a baseline had calls the cassette did not match (``unmatched``:
    variant → count), those calls may be production's own, made too late: the verdict is INCONCLUSIVE with
    reason ``CASSETTE_INCOMPLETE`` (whatever else was found: a difference caused by a late call is not the
    candidate's). A covered window, or no unmatched baseline call, leaves the result as it is (an info note)."""
    if coverage is None:
        return result
    baseline_unmatched = {v: n for v, n in unmatched.items() if v.startswith("baseline") and n}
    reasons = [r for r in result.reasons if r.code not in ("CASSETTE_COVERAGE", "CASSETTE_INCOMPLETE")]
    if coverage.complete:
        reasons.append(Reason(code="CASSETTE_COVERAGE", severity="info", message=coverage.describe()))
        return result.model_copy(update={"reasons": reasons})
    if not baseline_unmatched:
        reasons.append(Reason(code="CASSETTE_COVERAGE", severity="info",
                              message=coverage.describe() + "; every baseline call was served or needed no cassette"))
        return result.model_copy(update={"reasons": reasons})
    calls = ", ".join(f"{v}: {n}" for v, n in sorted(baseline_unmatched.items()))
    reasons.append(Reason(
        code="CASSETTE_INCOMPLETE", severity="inconclusive",
        message=f"{coverage.describe()}; the baselines made calls production's cassette did not hold ({calls}): "
        "production may have made them only after the replays read the cassette, so their placeholders can make "
        "outputs differ through no fault of the candidate. Fix: run again once production keeps up with its "
        "input, or raise the submission's window_wait",
    ))
    reasons.sort(key=lambda r: {"fail": 1, "inconclusive": 0, "info": 2}[r.severity])
    return result.model_copy(update={"reasons": reasons, "verdict": "INCONCLUSIVE"})
