"""Has production processed the replay window yet? What a replay's cassette can be trusted for.

Production records its mediated calls to its cassette topic *while* it processes the window's records, after
it resumed from the savepoint. A replay reads the cassette once, when it is submitted; a call production had
not made by then finds no recorded result and is served its fallback (a placeholder), through no fault of the
candidate. So the submission waits, bounded, until production has processed the window: until production's
output topic holds an output for every window record. Outputs are tied to the input record that caused them
by event time: Flink Agents stamps every output with its input record's timestamp, and Flink's Kafka sink
writes it as the record's timestamp (the capture topic holds the input records with their event time). When
the input records carry the comparison's key (an agent that echoes its input's id), a record and its output
are tied by event time *and* key (:func:`window_units`): event times alone cannot tell records apart when many
share one (a feed stamped with one time; outputs of records after the window with the same time would stand
in for the window's), and such a window without keys is not judged (a note says why) rather than judged wrong.

:func:`records_reached` counts the window records that have an output; :class:`WindowCoverage` is what the
wait found, carried to the comparison: a window that was not covered when the replays read the cassette and
a baseline with calls the cassette did not match make the verdict INCONCLUSIVE (``CASSETTE_INCOMPLETE``),
never a false difference. Pure: pydantic only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from airflow_flink_replay.core.compare.result import ComparisonResult, Reason

__all__ = [
    "KEYED_SHARE",
    "SHARED_TIME_MIN",
    "SHARED_TIME_SHARE",
    "Tie",
    "WindowCoverage",
    "WindowUnits",
    "count_times",
    "records_before",
    "records_reached",
    "window_units",
    "with_coverage",
]

_Unit = TypeVar("_Unit", bound=Hashable)
#: How production's outputs tie to the window's records: one output per record, stamped with its event time
#: (``record``: an agent), or outputs of event-time windows, stamped when the watermark passed them
#: (``watermark``: a pipeline with a window; :func:`records_before`).
Tie = Literal["record", "watermark"]

#: Records are tied to their outputs by event time and key when at least this share of the window's records
#: carry the key (the rest are tied by their event time and no key, as their outputs are).
KEYED_SHARE = 0.9
#: Without keys: when at least this share of the window's records (and :data:`SHARED_TIME_MIN` of them) share
#: their event time with another window record, outputs of other records with the same time could stand in for
#: them: the window is not judged (a few records in one millisecond are told apart by count).
SHARED_TIME_SHARE = 0.1
SHARED_TIME_MIN = 10


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


def records_reached(window_times: Mapping[_Unit, int], output_times: Mapping[_Unit, int]) -> int:
    """How many window records production's outputs reach: per event time, as many records as there are
    outputs with that time (records sharing a timestamp are told apart by count only).

    :param window_times: event time (ms), or ``(event time, key)`` (:func:`window_units`) → number of window
        records with it.
    :param output_times: the same units → number of production outputs with it (any number of other units:
        outputs of records before or after the window are not counted).
    """
    return sum(min(n, output_times.get(t, 0)) for t, n in window_times.items())


def records_before(window_times: Mapping[int, int], latest_output: int | None) -> int:
    """How many window records production has processed when its outputs are tied by **watermark** (a pipeline
    whose outputs come from an event-time window): an output stamped ``latest_output`` was emitted when
    production's watermark passed that time, so every record up to it went through every stage before it.

    :param window_times: event time (ms) → number of window records with it.
    :param latest_output: the newest event time among production's outputs since the savepoint (None: none yet).
    """
    if latest_output is None:
        return 0
    return sum(n for t, n in window_times.items() if t <= latest_output)


def count_times(times: list[int]) -> Counter[int]:
    """Event times → how often each occurs (records without a timestamp, ``<= 0``, left out)."""
    return Counter(t for t in times if t > 0)


@dataclass(frozen=True)
class WindowUnits:
    """The window's records as they are tied to production's outputs (:func:`window_units`)."""

    #: event time → number of window records with it
    times: Counter[int]
    #: ``(event time, key)`` → number of window records, when enough records carry the key (:data:`KEYED_SHARE`)
    keyed: Counter[tuple[int, str | None]] | None
    #: why the records cannot be told apart by event time alone ("" when they can)
    times_note: str = ""

    @property
    def total(self) -> int:
        """The window's records (with an event time)."""
        return sum(self.times.values())

    def reached(self, by_time: Mapping[int, int], by_unit: Mapping[tuple[int, str | None], int]) -> tuple[int, str]:
        """How many records production's outputs reach (``by_time``: outputs per event time; ``by_unit``: per
        ``(event time, key)``), and a note when that cannot be told. Keys tie records to outputs that carry them;
        they are given up for event time alone when the outputs at the window's times carry no key (and reach the
        window by time), or carry keys none of which is a window record's though twice the window's outputs came."""
        by_times = records_reached(self.times, by_time)
        if self.keyed is not None:
            by_keys = records_reached(self.keyed, by_unit)
            keyed_outputs = sum(n for (t, k), n in by_unit.items() if k is not None and t in self.times)
            carry_none = keyed_outputs == 0 and by_times >= self.total
            if by_keys or not (carry_none or keyed_outputs >= 2 * self.total):
                return by_keys, ""
        return by_times, self.times_note


def window_units(records: Sequence[tuple[int, str | None]]) -> WindowUnits | str:
    """The window's records (``(event time ms, key or None)`` each) as units to tie to production's outputs, or
    why production's progress cannot be told by its outputs (records without an event time). Without keys,
    event times shared by too many window records (:data:`SHARED_TIME_SHARE`) leave a note."""
    timed = [(t, k) for t, k in records if t > 0]
    if len(timed) < len(records):
        return (f"{len(records) - len(timed)} window record(s) carry no event time: production's progress cannot "
                "be told by its outputs")
    keyed = bool(timed) and sum(k is not None for _t, k in timed) >= KEYED_SHARE * len(timed)
    times = Counter(t for t, _k in timed)
    shared = sum(n for n in times.values() if n > 1)
    note = ""
    if shared >= max(SHARED_TIME_MIN, SHARED_TIME_SHARE * len(timed)):
        note = (f"{shared} of the window's {len(timed)} records share their event time with another, and their "
                "outputs carry no key of theirs: outputs of records outside the window could stand in for them, so "
                "production's progress cannot be told (fix: set the spec's compare_key to a field the input records "
                "and the outputs both carry, or give records distinct event times)")
    return WindowUnits(times=times, keyed=Counter(timed) if keyed else None, times_note=note)


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
