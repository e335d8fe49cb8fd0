"""Reading a replay variant's results back from its output and audit topics (the Airflow side).

:class:`ReplayResultsHook` extends :class:`~airflow_flink_replay.hooks.kafka_offsets.KafkaOffsetsHook` (the
Kafka provider's connection, its consumer hook): once the replay job FINISHED — its sink flushed every output
and each audit record was flushed when written, so the topics hold everything the job wrote — it reads each
topic from its first record to the end of the log, drops what a restart sent twice
(:class:`~airflow_flink_replay.core.results.ResultReader`: by ``_replay.output_id`` / the audit record's
``id``), and writes one JSONL file to the run folder: a local path or any ``ObjectStoragePath`` URI
(``s3://``, ``gs://``, ``memory://``, ``file://``).

The end of the log, not the high watermark read beforehand: the local broker (tansu) reports a wrong high
watermark for multi-record batches, which the Flink sink writes; end of the log is what the consumer is told
when it has fetched everything (``enable.partition.eof``).
"""

from __future__ import annotations

from airflow_flink_replay.core.results import ResultReader, ResultTopics
from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook, Record
from airflow_flink_replay.run_io import run_storage

__all__ = ["ReplayResultsHook"]

#: The last offset a range may reach: the topics are read to the end of their log.
_LOG_END = 2**62


class ReplayResultsHook(KafkaOffsetsHook):
    """Read a replay variant's result topics into files (connection type ``kafka``)."""

    def collect(self, topic: str, kind: str, target: str, *, timeout: float = 120.0) -> ResultReader:
        """Read ``topic`` (``kind``: ``outputs`` or ``audit``) from its start to the end of its log into the
        JSONL file ``target``, one record a line, re-sent copies dropped; returns what was read."""
        reader = ResultReader(kind=kind)
        ranges = {p: (low, _LOG_END) for p, low in self.begin_offsets(topic).items()}

        with run_storage.open_text(target, "w") as out:

            def on_record(record: Record) -> None:
                if record.value is None:
                    return
                text = record.value.decode("utf-8").rstrip("\n")
                if reader.keep(text):
                    out.write(text + "\n")

            self.consume(topic, ranges, on_record, timeout=timeout)
        return reader.finish()

    def collect_results(self, topics: ResultTopics, outputs: str, audit: str) -> dict[str, ResultReader]:
        """Both topics of one variant into ``outputs`` and ``audit`` (files or URIs); closes the consumer."""
        try:
            return {
                "outputs": self.collect(topics.outputs, "outputs", outputs),
                "audit": self.collect(topics.audit, "audit", audit),
            }
        finally:
            self.close()
