"""The pure parts of ``benchmarks/throughput.py``: the replay cluster's slot use from its samples, one run's and one
batch's figures from the REST API's DAG runs and the run records, the table, the DAG file.

The benchmark itself needs the local stack and an Airflow (~20 min); these keep its arithmetic honest in
milliseconds.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.throughput import (  # noqa: E402 (the benchmarks folder is not an installed package)
    SlotSample,
    batch_row,
    dag_file,
    format_table,
    main,
    run_row,
    slot_use,
)

pytestmark = pytest.mark.unit

#: 4 slots: idle for 10 s, a run's 3 replays for 20 s, all 4 for 10 s, idle again at 40 s
SAMPLES = [SlotSample(0, 4, 4), SlotSample(10, 4, 1), SlotSample(30, 4, 0), SlotSample(40, 4, 4)]


def test_slot_use_is_weighted_by_the_time_each_sample_holds() -> None:
    use = slot_use(SAMPLES, per_run=3)
    assert use["slots_total"] == 4 and use["peak_in_use"] == 4 and use["peak_share"] == 1.0
    assert use["mean_in_use"] == pytest.approx((0 * 10 + 3 * 20 + 4 * 10) / 40)  # 2.5, not the samples' mean 1.75
    assert use["mean_share"] == pytest.approx(2.5 / 4)
    # fewer than 3 free from 10 s to 40 s: no room for another run's replays for 30 of the 40 s
    assert use["short_share"] == pytest.approx(0.75)
    assert (use["sampled_s"], use["samples"]) == (40, 4)


def test_slot_use_does_not_depend_on_the_samples_order() -> None:
    assert slot_use(list(reversed(SAMPLES)), per_run=3) == slot_use(SAMPLES, per_run=3)


def test_slot_use_of_one_sample_and_of_none() -> None:
    one = slot_use([SlotSample(5, 4, 1)], per_run=3)
    assert (one["mean_in_use"], one["peak_in_use"], one["short_share"], one["sampled_s"]) == (3.0, 3, 1.0, 0.0)
    none = slot_use([], per_run=3)
    assert none["samples"] == 0 and none["mean_in_use"] is None and none["slots_total"] is None


def test_a_cluster_without_taskmanager_counts_no_slot_in_use() -> None:
    """A TaskManager restarting: ``/overview`` says 0 of 0; the total is the most the cluster had."""
    use = slot_use([SlotSample(0, 4, 1), SlotSample(10, 0, 0), SlotSample(20, 4, 4)], per_run=3)
    assert use["slots_total"] == 4 and use["mean_in_use"] == pytest.approx(1.5)


def _dag_run(run_id: str, start: str | None, end: str | None, state: str = "success") -> dict:
    return {"dag_id": "throughput_gate_0", "dag_run_id": run_id, "state": state, "start_date": start,
            "end_date": end}  # fmt: skip


def _record(capacity: list[float | None], lock: list[float | None], lease: float | None = 0.2) -> dict:
    variants = [{"variant": f"v{i}", "capacity_wait_s": c, "submit_lock_wait_s": s}
                for i, (c, s) in enumerate(zip(capacity, lock, strict=True))]  # fmt: skip
    return {"verdict": "PASS", "variants": variants, "lease": None if lease is None else {"waited_s": lease}}


def test_run_row_takes_the_runs_wall_time_and_its_largest_waits() -> None:
    row = run_row("p0", _dag_run("r1", "2026-12-07T10:00:00Z", "2026-12-07T10:02:30.5+00:00"),
                  _record([12.0, 12.0, None], [0.4, 0.5, 0.4]), ["worker-b", "worker-a", "worker-a"])  # fmt: skip
    assert row["wall_s"] == 150.5 and row["verdict"] == "PASS" and row["state"] == "success"
    assert (row["lease_wait_s"], row["capacity_wait_s"], row["submit_lock_wait_s"]) == (0.2, 12.0, 0.5)
    assert row["hosts"] == ["worker-a", "worker-b"]


def test_run_row_of_a_run_without_record_or_end() -> None:
    row = run_row("p1", _dag_run("r2", "2026-12-07T10:00:00Z", None, state="failed"), {}, [])
    assert row["wall_s"] is None and row["verdict"] is None
    assert row["lease_wait_s"] is None and row["capacity_wait_s"] is None and row["submit_lock_wait_s"] is None


def test_batch_row_spans_the_first_start_to_the_last_end() -> None:
    runs = [run_row("p0", _dag_run("a", "2026-12-07T10:00:00Z", "2026-12-07T10:02:00Z"), _record([0.0], [0.1]), []),
            run_row("p1", _dag_run("b", "2026-12-07T10:00:05Z", "2026-12-07T10:04:00Z"), _record([90.0], [0.3]), [])]
    batch = batch_row(2, runs, SAMPLES, per_run=3)
    assert batch["batch_s"] == 240.0 and batch["runs_per_hour"] == 30.0
    assert batch["verdicts"] == {"PASS": 2} and batch["slots"]["peak_in_use"] == 4
    assert batch["slot_samples"][1] == [10, 4, 1]  # the samples themselves, for the JSON
    unfinished = batch_row(2, [runs[0], run_row("p1", _dag_run("b", "2026-12-07T10:00:05Z", None), {}, [])],
                           [], per_run=3)  # fmt: skip
    assert unfinished["batch_s"] is None and unfinished["runs_per_hour"] is None
    assert unfinished["verdicts"] == {"PASS": 1, "None": 1}


def test_the_table_has_a_row_per_batch_and_a_line_per_run() -> None:
    one = batch_row(1, [run_row("p0", _dag_run("run-a", "2026-12-07T10:00:00Z", "2026-12-07T10:02:00Z"),
                                _record([0.0], [0.1]), ["worker-a"])], SAMPLES, per_run=3)  # fmt: skip
    two = batch_row(2, [run_row("p0", _dag_run("run-b", "2026-12-07T11:00:00Z", "2026-12-07T11:02:00Z"),
                                _record([0.0], [0.2]), []),
                        run_row("p1", _dag_run("run-c", "2026-12-07T11:00:00Z", None), {}, [])], [], per_run=3)
    table = format_table([one, two]).splitlines()
    assert table[0].split()[:3] == ["N", "batch", "s"]
    row_one = next(line for line in table if line.lstrip().startswith("1 "))
    assert "120.0" in row_one and "4 / 2.5 of 4 (62%)" in row_one and "PASS 1" in row_one
    row_two = next(line for line in table if line.lstrip().startswith("2 "))
    assert " - " in row_two and "None 1, PASS 1" in row_two  # an unfinished batch: no batch time, no samples
    assert any("run-a" in line and "worker-a" in line for line in table)
    assert any("run-c" in line and "lease - s" in line for line in table)


def test_the_dag_file_holds_one_gate_per_spec() -> None:
    text = dag_file([Path("/w/p0/spec.yaml"), Path("/w/p1/spec.yaml")])
    ast.parse(text)
    assert "dag_id='throughput_gate_0'" in text and "dag_id='throughput_gate_1'" in text
    assert "'/w/p1/spec.yaml'" in text and text.count("kind='gate'") == 2


def test_the_command_line_refuses_a_batch_of_no_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--n", "0"])
    assert exit_.value.code == 2 and "at least 1" in capsys.readouterr().err
