"""Step 8 of the replay chain: compare the baselines' (baseline, baseline-2 and any extra A/A replays) and the
candidate's outputs, report, and gate.

:class:`CompareReplayOutputsOperator` runs :func:`airflow_flink_replay.core.compare.compare_runs` on
the replay outputs (and audits), writes summary.json / report.html / junit.xml next to the manifest (or
to ``report.uri``), pushes the summary to XCom, links the HTML report, and fails the task on FAIL when it
is a gate.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.manifest import ReplayManifest
from airflow_flink_replay.core.replay_spec import extra_baseline_names
from airflow_flink_replay.exceptions import CompareInputError
from airflow_flink_replay.ids import XCOM_CASSETTE_COVERAGE_KEY, XCOM_COMPARISON_KEY
from airflow_flink_replay.links.report import ReplayReportLink
from airflow_flink_replay.run_io import run_storage
from airflow_flink_replay.ui.paths import run_file_url

if TYPE_CHECKING:  # the engine and its reports are imported when the task compares, not by every DAG parse
    from airflow_flink_replay.core.compare.result import ComparisonResult, FidelityStat, Reason



class ComparedRuns(NamedTuple):
    """The replay runs a comparison reads, every member templated (the replay DAG passes its ``resolve`` task's
    XComs). Outputs are JSONL (a URI or a local path); audits are the side-effect audits (a file, or a folder of
    ``*.jsonl``), optional, and compared when the baseline's or the candidate's is given.

    A NamedTuple because its members are templated: Airflow renders a tuple's members into a new tuple of the same
    class and finds the XComArgs inside it (their tasks become upstream), where it would set an object's attributes
    in place.

    :param baseline: the baseline's outputs.
    :param candidate: the candidate's outputs.
    :param baseline_2: the baseline run again, to measure noise; without it exact rules apply.
    :param extra_baselines: more A/A replays of the baseline, in order: baseline-3, baseline-4 … (the spec's
        ``aa_replays`` above 1). The noise is measured on more pairs of baselines, which narrows it for a noisy agent;
        they need ``baseline_2``.
    :param baseline_audit: the baseline's audit; with ``candidate_audit``.
    :param baseline_2_audit: baseline-2's audit.
    :param extra_baseline_audits: the extra baselines' audits, in the order of ``extra_baselines``; their calls the
        cassette did not match count as baseline-2's do.
    :param candidate_audit: the candidate's audit.
    """

    baseline: str
    candidate: str
    baseline_2: str | None = None
    extra_baselines: Sequence[str] = ()
    baseline_audit: str | None = None
    baseline_2_audit: str | None = None
    extra_baseline_audits: Sequence[str] = ()
    candidate_audit: str | None = None


class ReportSettings(NamedTuple):
    """Where the comparison's reports go, how they are linked, and which verdicts fail the task (the gate).
    ``uri`` and ``url`` are templated (a NamedTuple, for the reason :class:`ComparedRuns` gives).

    :param uri: the folder for the reports; None: ``<the manifest's folder>/compare-<run id>/``.
    :param url: the URL under which readers open the report (``{report}`` is replaced by the report.html URI);
        None: the report's page in the Airflow UI, served by the provider's plugin from where the report was
        written (``<[api] base_url's path>/flink-replay/runs/<dag_id>/<run_id>/report.html``; docs/ui.md).
    :param gate: fail the task when the verdict is FAIL (True), or only report (False).
    :param fail_on_inconclusive: also fail the task when the verdict is INCONCLUSIVE.
    """

    uri: str | None = None
    url: str | None = None
    gate: bool = True
    fail_on_inconclusive: bool = False


class FidelitySettings(NamedTuple):
    """Production's own outputs for the window, compared with the baseline's: the fidelity figure.
    ``output_topic`` is templated (a NamedTuple, for the reason :class:`ComparedRuns` gives).

    :param output_topic: production's output topic: its outputs from the offsets the manifest recorded at the
        savepoint are read; None: no fidelity figure.
    :param kafka_conn_id: the Kafka connection to read it with.
    :param wait: seconds to wait, at most, for production to output the window's records: it processes them after it
        resumes, behind whatever backlog it has; outputs it has not written yet would count as unfaithful. Polls while
        the outputs production wrote for the baseline's keys grow.
    """

    output_topic: str | None = None
    kafka_conn_id: str = "kafka_default"
    wait: float = 60.0


class CompareReplayOutputsOperator(BaseOperator):
    """Compare replay outputs against the noise and gate the release.

    XCom ``return_value`` (and key ``comparison``, pushed before a gate failure): ``{"verdict", "mode",
    "reasons", "worst_fields", "counts", "report_uri", "summary_uri", "junit_uri"}``.

    :param runs: the outputs and audits of the runs to compare (:class:`ComparedRuns`, templated).
    :param key: JSONPath of the correlation key, e.g. ``$.id`` (templated).
    :param ignore: JSONPaths to ignore (``$._replay`` always is).
    :param config: a :class:`CompareConfig` or its dict form (templated).
    :param changed_resources: the resources the candidate changed, ``{name: "changed" | "added"}`` (the agent
        check's XCom ``changed_resources``; templated): listed in the report (``CHANGED_RESOURCES``) with how the
        candidate's replay treated their calls.
    :param manifest_uri: the replay manifest; reports go to ``<its folder>/compare-<run id>/`` unless
        ``report.uri`` is given (templated). When given it is read before anything is compared and must verify
        (digest; signature with ``signing_conn_id``): one that does not, or is not there, fails the task.
    :param signing_conn_id: Airflow connection whose password is the manifest signing key (the spec's
        ``manifest_signing_conn_id``): the manifest's signature is checked as the other steps check it.
    :param report: where the reports go and which verdicts fail the task (:class:`ReportSettings`; default: next
        to the manifest, a gate on FAIL).
    :param fidelity: production's output topic and how to read it (:class:`FidelitySettings`): the baseline's
        outputs are compared with production's for the window (the fidelity figure). None: no fidelity figure.
    :param submit_task_id: the task that submitted the replays: its XCom ``cassette_coverage`` tells how far
        production had processed the window when the replays read its cassette; a window not covered with
        baseline calls the cassette did not match makes the verdict INCONCLUSIVE
        (:func:`~airflow_flink_replay.core.window_coverage.with_coverage`).
    """

    template_fields: Sequence[str] = (
        "runs", "key", "config", "changed_resources", "manifest_uri", "report", "fidelity",
    )  # fmt: skip
    operator_extra_links = (ReplayReportLink(),)
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        runs: ComparedRuns,
        key: str = "$.id",
        ignore: Sequence[str] = (),
        config: CompareConfig | Mapping[str, Any] | None = None,
        changed_resources: Mapping[str, str] | None = None,
        manifest_uri: str | None = None,
        signing_conn_id: str | None = None,
        report: ReportSettings | None = None,
        fidelity: FidelitySettings | None = None,
        submit_task_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.runs = runs
        self.key = key
        self.ignore = ignore
        # kept as given (it may be an XComArg resolved at run time); validated in execute()
        self.config = config.model_dump(mode="json") if isinstance(config, CompareConfig) else config
        self.changed_resources = changed_resources
        self.manifest_uri = manifest_uri
        self.signing_conn_id = signing_conn_id
        self.report = report or ReportSettings()
        self.fidelity = fidelity
        self.submit_task_id = submit_task_id

    def _report_dir(self, context: Any) -> Any:
        """Where the reports go: ``report.uri``, else a folder of this run next to the manifest."""
        if self.report.uri:
            target = str(self.report.uri)
        elif self.manifest_uri:
            run_id = str(context.get("run_id") or "run")
            safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id)
            manifest = str(self.manifest_uri)
            target = f"{manifest.rsplit('/', 1)[0]}/compare-{safe}"
        else:
            raise AirflowException(
                "CompareReplayOutputsOperator: give report=ReportSettings(uri=...) (a folder) or manifest_uri (reports "
                "go next to it)"
            )
        return run_storage.location(target)

    def execute(self, context: Any) -> dict[str, Any]:
        """Compare, write the reports, push the summary and the link; fail on FAIL when gating."""
        config = self._config()
        _ = self._manifest  # fails closed before anything is compared: provenance and fidelity read it
        out_dir = self._report_dir(context)
        result = self._with_coverage(context, self._compared(config))
        result.reasons.extend(self._provenance())
        summary, url = self._reported(context, result, out_dir)
        context["ti"].xcom_push(key=XCOM_COMPARISON_KEY, value=summary)
        self._log_result(result, summary["report_uri"])
        self._gate(result, f"{summary['report_uri']}, in the Airflow UI: {url}")
        return summary

    def _config(self) -> CompareConfig:
        """The comparison's config, validated (a bad one fails the task: a retry reads the same)."""
        try:
            if isinstance(self.config, CompareConfig):
                return self.config
            return CompareConfig.model_validate(dict(self.config or {}))
        except Exception as err:
            raise AirflowFailException(f"CompareReplayOutputsOperator: bad config: {err}") from None

    def _reported(self, context: Any, result: ComparisonResult, out_dir: Any) -> tuple[dict[str, Any], str]:
        """Write the reports into ``out_dir`` and link the HTML one; return the summary (with the reports' URIs) and
        the link's URL."""
        from airflow_flink_replay.core.compare.reports import write_reports

        written = write_reports(result, out_dir)
        report = _uri(written["html"])
        if self.report.url:
            url = self.report.url.replace("{report}", report)
        else:  # a browser cannot open file:// or s3:// from the UI: the plugin serves the report (ui/app.py)
            ti = context["ti"]
            url = run_file_url(ti.dag_id, ti.run_id, "report.html")
        ReplayReportLink.persist(context, url)
        summary = {
            **result.summary(),
            "report_uri": report,
            "summary_uri": _uri(written["summary"]),
            "junit_uri": _uri(written["junit"]),
        }
        return summary, url

    def _gate(self, result: ComparisonResult, report: str) -> None:
        """Fail the task on FAIL (``report.gate``), and on INCONCLUSIVE with ``report.fail_on_inconclusive``."""
        if self.report.gate and result.verdict == "FAIL":
            raise AirflowFailException(f"replay gate: FAIL — {_decisive(result)} (report: {report})")
        if self.report.fail_on_inconclusive and result.verdict == "INCONCLUSIVE":
            raise AirflowFailException(f"replay gate: INCONCLUSIVE — {_decisive(result)} (report: {report})")

    def _compared(self, config: CompareConfig) -> ComparisonResult:
        """Open every run's outputs and audits (closed again when compared), compare them and, with production's
        output topic, add the fidelity figure. Unreadable input fails the task (no retry: it reads the same)."""
        runs = self.runs
        extra = _listed(runs.extra_baselines, "extra_baselines")
        extra_audits = _listed(runs.extra_baseline_audits, "extra_baseline_audits")
        with contextlib.ExitStack() as stack:
            source = _opener(stack)
            try:
                audits = None
                if runs.baseline_audit or runs.candidate_audit or runs.baseline_2_audit or extra_audits:
                    audits = {
                        "baseline": source(runs.baseline_audit),
                        "candidate": source(runs.candidate_audit),
                        "baseline_2": source(runs.baseline_2_audit),
                        "extra_baselines": [source(a) for a in extra_audits],
                        "changed": dict(self.changed_resources or {}),
                    }
                from airflow_flink_replay.core.compare.engine import compare_runs

                result = compare_runs(
                    source(runs.baseline),
                    source(runs.candidate),
                    baseline_2=source(runs.baseline_2),
                    extra_baselines=[source(u) for u in extra],
                    key=self.key,
                    config=config,
                    audits=audits,
                    ignore=list(self.ignore or []),
                )
                if self.fidelity is not None and self.fidelity.output_topic:
                    result = self._with_fidelity(
                        result,
                        self.fidelity,
                        partial(source, runs.baseline),
                        partial(source, runs.baseline_2),
                        config,
                        extra_baselines=[partial(source, u) for u in extra],
                    )
            except CompareInputError as err:
                raise AirflowFailException(f"cannot compare: {err}") from None
        return result

    def _with_fidelity(
        self,
        result: ComparisonResult,
        fidelity: FidelitySettings,
        baseline: Callable[[], Any],
        baseline_2: Callable[[], Any],
        config: CompareConfig,
        *,
        extra_baselines: Sequence[Callable[[], Any]] = (),
    ) -> ComparisonResult:
        """``result`` with the baseline compared against production's own outputs for the window (``fidelity``: where
        and how to read them): those after the output topic's offsets at the savepoint, which the manifest records;
        ``baseline_2`` and ``extra_baselines`` tell how often the baseline reproduces itself (each opens its outputs
        when called: read only if there are offsets to read production's outputs from)."""
        from airflow_flink_replay.core.compare.fidelity import FidelityReference, with_fidelity
        from airflow_flink_replay.hooks.kafka_offsets import KafkaOffsetsHook
        from airflow_flink_replay.run_io.production_outputs import export_outputs

        topic = str(fidelity.output_topic)
        starts, mode = self._output_offsets(topic)
        if starts is None:
            return result
        with tempfile.TemporaryDirectory(prefix="afr-production-outputs-") as tmp:
            target = Path(tmp) / "production.outputs.jsonl"

            def measure() -> tuple[FidelityStat, int]:  # only production's outputs are read again
                hook = KafkaOffsetsHook(fidelity.kafka_conn_id)
                try:
                    read = export_outputs(hook, topic, target, start_offsets=starts)
                finally:
                    hook.close()
                return reference.measure(target), read

            try:
                reference = FidelityReference(
                    baseline(),
                    key=result.key,
                    ignore=result.ignore,
                    config=config,
                    baseline_2=baseline_2(),
                    extra_baselines=[opened() for opened in extra_baselines],
                )
                stat, read = wait_for_production(measure, float(fidelity.wait), log=self.log)
            except Exception as err:  # the comparison stands; the figure is missing, and says why
                self.log.warning("cannot read production's outputs from %s for the fidelity figure: %s", topic, err)
                return result
        stat.production = f"kafka topic {topic} from offsets {starts} ({read} outputs read)"
        self.log.info("fidelity: %s of %s baseline outputs equal production's", stat.equal, stat.baseline_outputs)
        racing = (
            "the savepoint was taken while production kept running (quiesce_mode=savepoint): records that raced it "
            "are in production's state and not in the replay's"
            if mode == "savepoint"
            else None
        )
        return with_fidelity(result, stat, not_enforced=racing)

    def _with_coverage(self, context: Any, result: ComparisonResult) -> ComparisonResult:
        """``result`` judged with the submission's window coverage and the unmatched calls of every baseline
        (baseline-2's and the extra ones' count alike)."""
        if not self.submit_task_id:
            return result
        from airflow_flink_replay.core.window_coverage import WindowCoverage, with_coverage
        from airflow_flink_replay.operators.replay import audit_counts

        found = context["ti"].xcom_pull(task_ids=self.submit_task_id, key=XCOM_CASSETTE_COVERAGE_KEY)
        if not found:
            return result
        extra = _listed(self.runs.extra_baseline_audits, "extra_baseline_audits")
        audits = {
            "baseline": self.runs.baseline_audit,
            "baseline_2": self.runs.baseline_2_audit,
            **dict(zip(extra_baseline_names(len(extra)), extra, strict=True)),
        }
        unmatched = {v: audit_counts(str(a))[1].get("unmatched", 0) for v, a in audits.items() if a}
        return with_coverage(result, WindowCoverage.model_validate(found), unmatched)

    def _output_offsets(self, topic: str) -> tuple[dict[int, int] | None, str | None]:
        """The output topic's offsets at the savepoint and the quiesce mode, from the manifest (no offsets: no
        fidelity figure, logged)."""
        manifest = self._manifest
        outputs = manifest.capture.production_outputs if manifest is not None else None
        if manifest is not None and outputs is not None and outputs.topic == topic:
            return dict(outputs.start_offsets), manifest.production.savepoint.quiesce_mode
        if manifest is None:
            why = "no manifest to read them from"
        elif outputs is None:
            why = "the manifest records no output offsets (read at the savepoint)"
        else:
            why = f"the manifest's output offsets are of topic {outputs.topic!r}"
        self.log.warning("no fidelity figure for %s: %s", topic, why)
        return None, None

    def _provenance(self) -> list[Reason]:
        """Info reasons on the savepoint's provenance, from the manifest (none without one)."""
        from airflow_flink_replay.core.compare.provenance import provenance_reasons

        return provenance_reasons(self._manifest) if self._manifest is not None else []

    @cached_property
    def _manifest(self) -> ReplayManifest | None:
        """The run's manifest, read once and verified as every step verifies it (digest, and the signature with
        ``signing_conn_id``); None only for a run without one (no ``manifest_uri``). A manifest that does not
        verify or cannot be read fails the task: its quiesce mode and output offsets decide whether the
        fidelity floor applies, so an edited one must not be taken for "no manifest"."""
        if not self.manifest_uri:
            return None
        from airflow_flink_replay.core.manifest_io import load_manifest
        from airflow_flink_replay.exceptions import ManifestError
        from airflow_flink_replay.operators.manifest import signing_key

        uri = str(self.manifest_uri)
        try:
            return load_manifest(run_storage.location(uri), signing_key=signing_key(self.signing_conn_id))
        except ManifestError as err:  # tampered, unsigned under a key, not found, not a manifest: a retry won't do
            raise AirflowFailException(
                f"the run's manifest {uri} does not verify, so the comparison is refused (its provenance and "
                f"fidelity floor come from it): {err}"
            ) from None
        except (OSError, ImportError, ValueError) as err:
            raise AirflowException(
                f"cannot read the run's manifest {uri}: {err}. Fix: check that the comparison's worker can read "
                "it (and has the fsspec backend of its scheme)"
            ) from err

    def _log_result(self, result: ComparisonResult, report: str) -> None:
        self.log.info(
            "Comparison %s (%s): %d aligned outputs, report %s",
            result.verdict,
            result.mode,
            result.counts.aligned_candidate,
            report,
        )
        for reason in result.reasons:
            self.log.info("  [%s] %s: %s", reason.severity, reason.code, reason.message)


def _opener(stack: contextlib.ExitStack) -> Callable[[str | None], Any]:
    """How the comparison opens one run's outputs or audit: a local path as it is; a URI through ObjectStoragePath,
    a folder as its ``*.jsonl`` files (the replay job's per-worker audits), each stream closed with ``stack``."""

    def source(uri: str | None) -> Any:
        if uri is None:
            return None
        if run_storage.is_uri(str(uri)):
            path = run_storage.location(str(uri))
            if not path.exists():
                raise CompareInputError(str(uri), "not found")
            if path.is_dir():  # the replay job's per-worker audit files
                return [
                    _named(stack.enter_context(p.open("r", encoding="utf-8")), str(p))
                    for p in sorted(path.iterdir(), key=str)
                    if p.name.endswith(".jsonl")
                ]
            stream = stack.enter_context(path.open("r", encoding="utf-8"))
            with contextlib.suppress(AttributeError, TypeError):
                stream.name = str(uri)  # for error messages
            return stream
        return Path(uri)

    return source


def _listed(value: Any, name: str) -> list[Any]:
    """A templated sequence of URIs as a list. Text is refused: a template rendered to one string cannot be told
    apart into URIs safely."""
    if isinstance(value, str):
        raise AirflowFailException(
            f"CompareReplayOutputsOperator: {name} must be a list of URIs (one per baseline), got text "
            f"{value[:200]!r}. Fix: pass a list, of XComArgs or of one template each"
        )
    return list(value or [])


def _named(stream: Any, name: str) -> Any:
    with contextlib.suppress(AttributeError, TypeError):
        stream.name = name
    return stream


def _uri(path: Any) -> str:
    if isinstance(path, Path):
        return path.resolve().as_uri()
    return str(path)


def _decisive(result: ComparisonResult) -> str:
    reasons = [f"{r.code}: {r.message}" for r in result.reasons if r.severity != "info"]
    return "; ".join(reasons[:3]) or result.verdict


#: Seconds between looks at production's outputs while waiting for the window's.
PRODUCTION_OUTPUT_POLL = 5.0


def wait_for_production(
    measure: Callable[[], tuple[FidelityStat, int]],
    wait: float,
    *,
    log: Any,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[FidelityStat, int]:
    """Measure the fidelity once production has output the window's records: again every
    :data:`PRODUCTION_OUTPUT_POLL` seconds while some baseline outputs have no production output yet and that
    number went down since the last look, for at most ``wait`` seconds. Returns the last measurement."""
    deadline = clock() + wait
    stat, read = measure()
    missing = stat.baseline_outputs - stat.aligned
    while missing > 0 and clock() + PRODUCTION_OUTPUT_POLL <= deadline:
        log.info("production has output %s of the window's %s records so far; waiting for the rest (%.0f s left)",
                 stat.aligned, stat.baseline_outputs, deadline - clock())
        sleep(PRODUCTION_OUTPUT_POLL)
        stat, read = measure()
        now_missing = stat.baseline_outputs - stat.aligned
        if now_missing >= missing:  # production made no progress on the window: waiting longer will not help
            break
        missing = now_missing
    return stat, read
