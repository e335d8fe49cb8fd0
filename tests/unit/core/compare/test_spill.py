"""Spilled comparison (runs partitioned by key on disk) gives the in-memory result (issue 13 §3, memory)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.compare import CompareConfig, compare_runs
from airflow_flink_replay.core.compare.synthetic import make_audit, make_run, write_jsonl

N = 600


def _maps(n: int, variant: str, flip: float) -> list[dict[str, Any]]:
    rng = random.Random(variant)
    out = []
    for o in make_run(n, variant, 1, paraphrase=0.2, jitter=0.002, outputs_per_key=2):
        sku = f"SKU{o['id'][2:]}"
        o["decision_by_sku"] = {sku: "approve" if rng.random() >= flip else "reject"}
        out.append(o)
    return out


def _comparable(result) -> dict[str, Any]:
    data = result.model_dump(exclude={"duration_s", "generated_at", "examples", "missing", "extra", "config"})
    data["missing"] = sorted((m.key, m.index) for m in result.missing)
    data["extra"] = sorted((m.key, m.index) for m in result.extra)
    data["example_fields"] = sorted({e.field for e in result.examples})
    return data


@pytest.mark.parametrize("with_noise", [True, False], ids=["noise-calibrated", "exact"])
def test_spilled_comparison_equals_in_memory(tmp_path: Path, with_noise: bool) -> None:
    base = _maps(N, "baseline", 0.0)
    a = write_jsonl(tmp_path / "a.jsonl", [*base, {"no_key": 1}])
    a2 = write_jsonl(tmp_path / "a2.jsonl", _maps(N, "baseline_2", 0.0)[: N * 2 - 6])  # missing in A'
    b_recs = _maps(N, "candidate", 0.3)[10:]  # missing in B
    b_recs += [{**b_recs[0], "id": f"extra-{i}"} for i in range(4)]  # extra in B
    b = write_jsonl(tmp_path / "b.jsonl", b_recs)
    audits = {
        "baseline": write_jsonl(tmp_path / "aa.jsonl", make_audit(base, "baseline")),
        "candidate": write_jsonl(tmp_path / "ab.jsonl", make_audit(b_recs, "candidate", extra_tool_keys=0.1)),
    }
    a2_arg = a2 if with_noise else None
    memory = compare_runs(a, b, a2_arg, key="$.id", audits=audits)
    spilled = compare_runs(
        a, b, a2_arg, key="$.id", audits=audits, config=CompareConfig(spill_above_mb=0, spill_part_mb=1)
    )
    assert memory.verdict == "FAIL"
    assert "$.decision_by_sku.*" in {f.path for f in memory.fields}
    assert _comparable(spilled) == _comparable(memory)
    assert len(spilled.examples) == len(memory.examples)


def test_default_compares_small_inputs_in_memory_and_never_spills_streams(tmp_path: Path) -> None:
    from airflow_flink_replay.core.compare.engine import _spill_parts

    a = write_jsonl(tmp_path / "a.jsonl", make_run(50, "baseline", 1))
    assert _spill_parts(CompareConfig(), a, a, None) == 0
    assert _spill_parts(CompareConfig(spill_above_mb=0, spill_part_mb=1), a, a, None) == 2
    with a.open() as stream:
        assert _spill_parts(CompareConfig(spill_above_mb=1), stream, a, None) == 0
    assert _spill_parts(CompareConfig(spill_above_mb=None), a, a, a) == 0


# Peak Python allocations of the comparison itself (tracemalloc), in one process (spill_workers=1): the
# process's peak RSS (ru_maxrss) was already set by the imports on some machines and then grew by 0 in both
# modes. Whole-process RSS, workers included, is what benchmarks/compare.py prints.
SCRIPT = """
import sys, tracemalloc
from airflow_flink_replay.core.compare import CompareConfig, compare_runs
spill = sys.argv[4] == "spill"
config = CompareConfig(spill_above_mb=0 if spill else None, spill_part_mb=4, spill_workers=1)
tracemalloc.start()
result = compare_runs(sys.argv[1], sys.argv[3], sys.argv[2], key="$.id", config=config)
print(result.verdict, tracemalloc.get_traced_memory()[1] // 2**10)
"""


def test_spilling_bounds_memory(tmp_path: Path) -> None:
    """The same comparison in a fresh process: spilled, the growth of peak RSS is a fraction of in memory (at
    10k records a run: 12 MB against 41 MB; the gap widens with the runs, the spilled figure stays flat)."""
    from airflow_flink_replay.core.compare.synthetic import iter_run

    n = 10_000
    paths = [
        write_jsonl(tmp_path / f"{v}.jsonl", iter_run(n, v, s, paraphrase=0.2))
        for v, s in (("baseline", 1), ("baseline_2", 2), ("candidate", 3))
    ]
    grown = {}
    for mode in ("memory", "spill"):
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, *map(str, paths), mode], capture_output=True, text=True, check=True
        ).stdout.split()
        assert out[0] == "PASS"
        grown[mode] = int(out[1])
    assert grown["spill"] < grown["memory"] / 2, grown


def test_partitioning_in_worker_processes_equals_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs partitioned and aligned by several processes give exactly the one-process result, examples and
    the order of missing/extra outputs included (merged in partition order; what the workers' flatteners
    learned, map detection included, is merged back in run order). The number of partitions is fixed here:
    by default it grows with the processes, which changes only which examples of equal rank come first."""
    from airflow_flink_replay.core.compare import engine

    a = write_jsonl(tmp_path / "a.jsonl", _maps(300, "baseline", 0.0))
    a2 = write_jsonl(tmp_path / "a2.jsonl", _maps(300, "baseline_2", 0.0)[:590])
    b_recs = _maps(300, "candidate", 0.3)[7:]
    b = write_jsonl(tmp_path / "b.jsonl", [*b_recs, *({**b_recs[0], "id": f"extra-{i}"} for i in range(3))])
    results = {}
    for workers in (1, 2, 3):
        monkeypatch.setattr(engine, "_spill_parts", lambda config, *sources, w=workers: 6 // w)
        config = CompareConfig(spill_above_mb=0, spill_workers=workers)
        results[workers] = compare_runs(a, b, a2, key="$.id", config=config).model_dump(
            exclude={"duration_s", "generated_at", "config"}
        )
    assert results[1]["verdict"] == "FAIL" and results[1]["examples"] and results[1]["missing"]
    assert "$.decision_by_sku.*" in {f["path"] for f in results[1]["fields"]}
    assert results[2] == results[1]
    assert results[3] == results[1]


@pytest.mark.parametrize("workers", [1, 3])
def test_bad_line_in_a_worker_names_its_file_and_line(tmp_path: Path, workers: int) -> None:
    from airflow_flink_replay.exceptions import CompareInputError

    a = write_jsonl(tmp_path / "a.jsonl", make_run(20, "baseline", 1))
    a2 = write_jsonl(tmp_path / "a2.jsonl", make_run(20, "baseline_2", 2))
    b = tmp_path / "b.jsonl"
    b.write_text(a.read_text().replace('"id":"r-3",', '"id":"r-3",,', 1))
    a2.write_text(a2.read_text() + "[1]\n")  # also bad, but later in the order of reading (A, B, A')
    with pytest.raises(CompareInputError) as err:
        compare_runs(a, b, a2, key="$.id", config=CompareConfig(spill_above_mb=0, spill_workers=workers))
    assert err.value.source == str(b) and err.value.line == 4
    assert str(err.value).startswith(f"{b}:4: invalid JSON (")


def test_workers_never_import_from_the_folder_the_comparison_runs_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``copy.py`` in the current folder (the workers import ``copy``) is not what the workers import: its
    marker never appears, and the spilled result is the in-memory one."""
    runs = tmp_path / "runs"
    runs.mkdir()
    a = write_jsonl(runs / "a.jsonl", _maps(100, "baseline", 0.0))
    a2 = write_jsonl(runs / "a2.jsonl", _maps(100, "baseline_2", 0.0))
    b = write_jsonl(runs / "b.jsonl", _maps(100, "candidate", 0.3))
    marker = tmp_path / "planted-copy-ran.txt"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "copy.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    monkeypatch.chdir(cwd)
    spilled = compare_runs(a, b, a2, key="$.id", config=CompareConfig(spill_above_mb=0, spill_workers=3))
    assert not marker.exists()
    memory = compare_runs(a, b, a2, key="$.id")
    assert spilled.verdict == memory.verdict == "FAIL"
    assert _comparable(spilled)["fields"] == _comparable(memory)["fields"]
