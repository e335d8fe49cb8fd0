"""The memory journal on a real mem0 ``Memory`` (embedded Qdrant) and the journal cut of the vector-store fork.

The journal's Kafka topic is replaced here by an in-process list (``ListJournal``, a stand-in named as such: the
integration test ``tests/integration/test_memory_journal.py`` runs the real topic on the local broker).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_flink_replay.core.memory_fork import JournalPosition
from airflow_flink_replay.hooks.mem0 import Mem0Hook
from airflow_flink_replay.memory.journal import (
    JOURNAL_KEY,
    JournaledVectorStore,
    JournalTarget,
    journal_ids,
    split_journal,
)


class ListJournal:
    """Stand-in for the journal topic: records in a list; the position is its length."""

    def __init__(self) -> None:
        self.records: list[bytes] = []
        self.store_seen_at_send: list[bool] = []

    def send(self, *, value: bytes) -> None:
        self.records.append(value)

    def position(self) -> JournalPosition:
        return JournalPosition(topic="journal", offsets={0: len(self.records)}, noted_at=datetime.now(UTC).isoformat())

    def ids_since(self, position: JournalPosition) -> set[str]:
        return {i for value in self.records[position.offsets[0] :] for i in journal_ids(value)}


def _hook(tmp_path: Path) -> Mem0Hook:
    collection = f"afr_unit_{uuid.uuid4().hex[:8]}"
    return Mem0Hook(config={
        "vector_store": {"provider": "qdrant", "config": {"path": str(tmp_path / "q"), "collection_name": collection}},
        "history_db_path": str(tmp_path / "history.db"),
    })  # fmt: skip


def _journaled(hook: Mem0Hook, journal: ListJournal) -> Any:
    """Production's memory: the hook's own mem0 Memory with its vector store journaled."""
    memory = hook.get_memory()
    memory.vector_store = JournaledVectorStore(memory.vector_store, journal.send)
    return memory


@contextmanager
def _around_the_journal(memory: Any) -> Iterator[Any]:
    """Writes through ``memory`` bypass its journal inside the block (a writer around production's journal)."""
    journaled = memory.vector_store
    memory.vector_store = journaled._afr_inner
    try:
        yield memory
    finally:
        memory.vector_store = journaled


def _add(memory: Any, text: str) -> str:
    out = memory.add(text, user_id="prod", agent_id="k", run_id="ltm", infer=False)
    return str(out["results"][0]["id"])


def test_every_write_is_journaled_after_the_store_has_it(tmp_path: Path) -> None:
    hook = _hook(tmp_path)
    journal = ListJournal()
    memory = _journaled(hook, journal)
    inner = memory.vector_store._afr_inner

    def send(*, value: bytes) -> None:  # what the store holds when the record leaves
        ids = journal_ids(value)
        journal.store_seen_at_send.append(all((inner.get(i) is not None) == (b'"delete"' not in value) for i in ids))
        journal.records.append(value)

    memory.vector_store._afr_send = send
    first = _add(memory, "customer 1 likes tea")
    memory.update(first, "customer 1 likes green tea")
    second = _add(memory, "customer 2 likes coffee")
    memory.delete(second)
    assert [journal_ids(r) for r in journal.records] == [[first], [first], [second], [second]]
    assert [r.split(b'"op":"')[1].split(b'"')[0] for r in journal.records] == [b"insert", b"update", b"insert",
                                                                                b"delete"]
    assert journal.store_seen_at_send == [True, True, True, True]
    assert memory.get_all(filters={"user_id": "prod"})["results"][0]["memory"] == "customer 1 likes green tea"


def test_the_journal_travels_in_the_mem0_config_and_mem0_never_sees_it() -> None:
    target = JournalTarget(topic="j", bootstrap="kafka:9092")
    config = {"vector_store": {"provider": "qdrant"}, JOURNAL_KEY: target.model_dump()}
    rest, found = split_journal(config)
    assert found == target and JOURNAL_KEY not in (rest or {})
    assert split_journal({"vector_store": {}}) == ({"vector_store": {}}, None)
    with pytest.raises(ValueError, match="afr_journal"):
        split_journal({JOURNAL_KEY: {"topic": "j"}})


def test_the_journal_cut_reads_only_what_production_wrote_since_the_precopy(tmp_path: Path) -> None:
    hook = _hook(tmp_path)
    journal = ListJournal()
    memory = _journaled(hook, journal)
    kept = [_add(memory, f"customer {i} likes tea") for i in range(6)]
    pre = hook.precopy("prod", "replay-1", fork_id="run-1", journal=journal)
    assert pre.kind == "precopy" and pre.count == 6

    _add(memory, "customer 7 likes coffee")  # added
    memory.update(kept[0], "customer 0 likes green tea")  # updated
    memory.delete(kept[1])  # removed
    added_and_gone = _add(memory, "customer 8 is passing through")
    memory.delete(added_and_gone)  # added, then removed: nothing to copy
    noted = hook.read_precopy("replay-1", with_snapshot=True)  # as the stop window does before the stop
    assert noted is not None and noted.journal is not None and noted.journal.offsets == {0: 6}
    done = hook.fork("prod", "replay-1", fork_id="run-1", journal=journal)
    assert (done.delta, done.journal, done.added, done.updated, done.removed, done.count) == (True, True, 1, 1, 1, 6)
    now = hook.fingerprint("prod")
    assert done.source_fingerprint == now.digest and done.count == now.count
    copies = sorted(m["memory"] for m in hook.get_memory().get_all(filters={"user_id": "replay-1"})["results"])
    source = sorted(m["memory"] for m in hook.get_memory().get_all(filters={"user_id": "prod"})["results"])
    assert copies == source
    report = hook.verify_untouched("replay-1")
    assert report.ok and report.unchanged and report.count_at_fork == 6


def test_a_memory_added_or_removed_around_the_journal_makes_the_cut_read_everything(tmp_path: Path) -> None:
    """A writer that bypasses production's journaled memory (a program naming the journal without wrapping its
    memory, another process): the cut's ids-only check sees the namespace's ids differ from what the pre-copy
    and the journal account for, and reads the whole namespace instead of trusting the journal."""
    hook = _hook(tmp_path)
    journal = ListJournal()
    memory = _journaled(hook, journal)
    kept = [_add(memory, f"customer {i} likes tea") for i in range(4)]
    hook.precopy("prod", "replay-a", fork_id="run-a", journal=journal)
    hook.precopy("prod", "replay-d", fork_id="run-d", journal=journal)
    with _around_the_journal(memory):
        _add(memory, "customer 5 wrote around the journal")
    _add(memory, "customer 6 wrote through it")  # the journal is not silent: only incomplete
    added = hook.fork("prod", "replay-a", fork_id="run-a", journal=journal)
    assert (added.delta, added.journal, added.added, added.count) == (True, False, 2, 6)
    assert added.source_fingerprint == hook.fingerprint("prod").digest

    with _around_the_journal(memory):
        memory.delete(kept[0])
    removed = hook.fork("prod", "replay-d", fork_id="run-d", journal=journal)
    assert (removed.journal, removed.added, removed.removed, removed.count) == (False, 2, 1, 5)
    assert removed.source_fingerprint == hook.fingerprint("prod").digest


def test_an_update_around_the_journal_is_missed_by_the_journal_cut_but_not_by_the_full_read(tmp_path: Path) -> None:
    """What the journal does not name and leaves the ids as they were (an update around it), the journal cut does
    not read: why the journal is opt-in, and why the window falls back to the full read when production failed
    over (docs/limitations.md)."""
    hook = _hook(tmp_path)
    journal = ListJournal()
    memory = _journaled(hook, journal)
    kept = [_add(memory, f"customer {i} likes tea") for i in range(4)]
    hook.precopy("prod", "replay-j", fork_id="run-j", journal=journal)
    hook.precopy("prod", "replay-f", fork_id="run-f", journal=journal)
    with _around_the_journal(memory):
        memory.update(kept[0], "customer 0 changed their mind around the journal")
    cut = hook.fork("prod", "replay-j", fork_id="run-j", journal=journal)
    full = hook.fork("prod", "replay-f", fork_id="run-f")
    assert (cut.journal, cut.updated, cut.count) == (True, 0, 4)
    assert (full.journal, full.updated, full.count) == (False, 1, 4)
    assert full.source_fingerprint == hook.fingerprint("prod").digest != cut.source_fingerprint


def test_a_precopy_without_a_journal_position_makes_the_cut_read_everything(tmp_path: Path) -> None:
    hook = _hook(tmp_path)
    journal = ListJournal()
    memory = _journaled(hook, journal)
    _add(memory, "customer 1 likes tea")
    hook.precopy("prod", "replay-1", fork_id="run-1")  # no journal noted
    _add(memory, "customer 2 likes tea")
    done = hook.fork("prod", "replay-1", fork_id="run-1", journal=journal)
    assert (done.delta, done.journal, done.added) == (True, False, 1)
    assert done.source_fingerprint == hook.fingerprint("prod").digest


def test_the_fence_runs_after_the_last_read_of_production_and_before_any_write(tmp_path: Path) -> None:
    """The stop window's fence runs once the cut read production's namespace: a fence that fails (production's
    resumed job already ran) leaves the pre-copy untouched, and the cut can be taken again."""
    hook = _hook(tmp_path)
    journal = ListJournal()
    memory = _journaled(hook, journal)
    _add(memory, "customer 1 likes tea")
    hook.precopy("prod", "replay-1", fork_id="run-1", journal=journal)
    _add(memory, "customer 2 likes tea")
    before = {m.id for m in hook.list_memories("replay-1")}

    def fence() -> None:
        assert {m.id for m in hook.list_memories("replay-1")} == before  # nothing written into the fork yet
        raise RuntimeError("production's resumed job was already running")

    with pytest.raises(RuntimeError, match="already running"):
        hook.fork("prod", "replay-1", fork_id="run-1", journal=journal, on_source_read=fence)
    assert {m.id for m in hook.list_memories("replay-1")} == before and hook.read_precopy("replay-1") is not None
    calls: list[str] = []
    done = hook.fork("prod", "replay-1", fork_id="run-1", journal=journal, on_source_read=lambda: calls.append("x"))
    assert calls == ["x"] and (done.journal, done.added, done.count) == (True, 1, 2)


def test_the_cut_copies_productions_history_as_it_was_when_the_fence_ran(tmp_path: Path) -> None:
    """mem0's history rows of the changed memories are read with them, before the fence: an update production makes
    once it runs again (here, inside the fence) reaches neither the fork's memories nor their history."""
    hook = _hook(tmp_path)
    journal = ListJournal()
    memory = _journaled(hook, journal)
    kept = _add(memory, "customer 1 likes tea")
    hook.precopy("prod", "replay-1", fork_id="run-1", journal=journal)
    memory.update(kept, "customer 1 likes green tea")  # before the stop: in the cut, with its history row

    def production_runs_again() -> None:
        memory.update(kept, "customer 1 likes coffee now")  # after the savepoint: not in the cut

    done = hook.fork("prod", "replay-1", fork_id="run-1", journal=journal, on_source_read=production_runs_again)
    assert (done.journal, done.updated) == (True, 1)
    (copy,) = hook.list_memories("replay-1")
    assert copy.payload["data"] == "customer 1 likes green tea"
    history = [h["new_memory"] for h in hook.get_memory().history(copy.id)]
    assert "customer 1 likes green tea" in history and "customer 1 likes coffee now" not in history, history
