"""What production's memory journal costs each memory write (run: ``.venv/bin/python benchmarks/memory_journal.py``).

Production's memory writes through mem0 (``Memory.add``, ``infer=False``, the hashing embedder) into the local
stack's Chroma, once with the vector store journaled to a topic on the local broker
(:mod:`airflow_flink_replay.memory.journal`: one flushed record per write) and once without, in alternating
blocks of ``--block`` writes (the machine is shared: alternating keeps both under the same load). Prints the
median milliseconds per write of each and the difference: what the journal adds to every memory write
production makes. Needs the local stack up; removes its memories and its topic at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=400, help="writes of each kind")
    parser.add_argument("--block", type=int, default=50)
    args = parser.parse_args()

    from confluent_kafka.admin import AdminClient, NewTopic

    from airflow_flink_replay.hooks.mem0 import Mem0Hook
    from airflow_flink_replay.local.stack import LocalStack, StackConfig
    from airflow_flink_replay.memory.journal import JOURNAL_KEY, JournalTarget
    from airflow_flink_replay.memory.offline import build_offline_memory

    stack = LocalStack(StackConfig(workdir=ROOT / ".stack")).info()
    if stack is None:
        print("local stack is not up: run `.venv/bin/flink-replay stack up`", file=sys.stderr)
        return 2
    topic, user = f"bench-journal-{uuid.uuid4().hex[:6]}", f"bench-journal-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(15)
    target = JournalTarget(topic=topic, bootstrap=stack.kafka_bootstrap)
    plain = build_offline_memory(stack.mem0_config())
    journaled = build_offline_memory({**stack.mem0_config(), JOURNAL_KEY: target.model_dump()})
    times: dict[str, list[float]] = {"plain": [], "journaled": []}
    try:
        n = 0
        while len(times["journaled"]) < args.writes:
            for kind, memory in (("plain", plain), ("journaled", journaled)):
                for _ in range(args.block):
                    started = time.perf_counter()
                    memory.add(f"customer {n % 97} wrote review {n}", user_id=user, agent_id=f"k{n % 20}",
                               run_id="ltm", infer=False)
                    times[kind].append(time.perf_counter() - started)
                    n += 1
    finally:
        hook = Mem0Hook(config=stack.mem0_config())
        ids = [m.id for m in hook.list_memories(user)]
        for start in range(0, len(ids), 5000):
            hook.get_store().delete_ids(ids[start : start + 5000])
        admin.delete_topics([topic])[topic].result(30)
    plain_ms = 1000 * statistics.median(times["plain"])
    journal_ms = 1000 * statistics.median(times["journaled"])
    print(f"memory write (Memory.add, infer=False) on the local Chroma, median of {len(times['plain'])} each:")
    print(f"  without the journal {plain_ms:.2f} ms, with it {journal_ms:.2f} ms: +{journal_ms - plain_ms:.2f} ms "
          f"a write (+{100 * (journal_ms / plain_ms - 1):.0f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
