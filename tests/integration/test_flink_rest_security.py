"""Flink REST security end to end: TLS with a private CA and a bearer token (or basic auth) on the way to the
real JobManager, through the sync hook, the REST submitter and the async trigger.

The secured front is this test's own (named fake: the local stack's Flink serves plain HTTP; in a deployment
Flink's ``rest.ssl.*`` or an authenticating gateway sits there): an HTTPS server with a certificate of a CA made
here, answering 401 to any request without the expected credentials and forwarding the others to the stack's
JobManager. A Python job is submitted through it (jar upload, PythonDriver run), watched by
:class:`~airflow_flink_replay.triggers.flink.FlinkJobStateTrigger` and cancelled — every request carried the
credentials, and the token is in no link, log line or error message. A wrong token, an unknown CA and basic auth
are checked too.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.jobs import harness
from tests.rest_front import RestFront

pytestmark = pytest.mark.timeout(300)

TOKEN = "afr-rest-token-" + harness.unique("t")
USER, PASSWORD = "replayer", "afr-rest-password-" + harness.unique("p")


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A private CA and a server certificate for 127.0.0.1 signed by it: (ca.pem, server.pem, server.key)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(name("afr test CA")).issuer_name(name("afr test CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        x509.CertificateBuilder().subject_name(name("127.0.0.1")).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return paths


class SecuredFront(RestFront):
    """HTTPS in front of the JobManager: 401 without the credentials, else the request is forwarded."""

    ACCEPTED = (f"Bearer {TOKEN}", "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())

    def __init__(self, upstream: str, folder: Path) -> None:
        self.ca, cert, key = _certificates(folder)
        self.seen: list[tuple[str, str, bool]] = []  # (method, path, authorized)
        super().__init__(upstream, self._authorize, tls=(cert, key))

    def _authorize(self, request: Any) -> tuple[int, bytes] | None:
        authorized = request.headers.get("Authorization") in SecuredFront.ACCEPTED
        self.seen.append((request.command, request.path, authorized))
        return None if authorized else (401, b'{"errors": ["missing or wrong credentials"]}')

    def connection(self, monkeypatch: pytest.MonkeyPatch, conn_id: str, stack: Any, **fields: Any) -> str:
        """Register ``conn_id`` (a ``flink_rest`` connection to this front) in the environment; returns it."""
        extra = {"flink_home": stack.flink_home, "retries": 1, "timeout": 60, **fields.pop("extra", {})}
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}",
                           json.dumps({"conn_type": "flink_rest", "host": self.url, "extra": extra, **fields}))
        return conn_id


@pytest.fixture(scope="module")
def front(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredFront]:
    secured = SecuredFront(stack.flink_rest_url, tmp_path_factory.mktemp("tls"))
    yield secured
    secured.close()


def test_a_job_is_submitted_watched_and_cancelled_over_tls_with_a_token(
    stack: Any, front: SecuredFront, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook
    from airflow_flink_replay.hooks.flink_submit import get_submitter
    from airflow_flink_replay.triggers.flink import FlinkJobStateTrigger

    caplog.set_level("DEBUG")
    conn_id = front.connection(monkeypatch, "flink_secured", stack, extra={"bearer_token": TOKEN,
                                                                          "verify": str(front.ca)})
    hook = FlinkRestHook(conn_id)
    name = harness.unique("rest-tls")
    harness.create_topics(stack.kafka_bootstrap, f"{name}-in", f"{name}-out")
    program = harness.counter_program(stack.kafka_bootstrap, f"{name}-in", f"{name}-out", stack.connector_jars,
                                      job_name=name)  # fmt: skip
    job_id = get_submitter("rest", hook).submit(program, timeout=240).job_id
    try:
        async def first_event() -> Any:
            trigger = FlinkJobStateTrigger(job_id=job_id, target_states=["RUNNING"], flink_conn_id=conn_id,
                                           timeout=120, poll_interval=1.0)  # fmt: skip
            async for event in trigger.run():
                return event.payload
            return None

        event = asyncio.run(first_event())
        assert event and event["status"] == "success" and event["state"] == "RUNNING", event
        link = hook.job_ui_url(job_id)
        assert link.startswith(front.url) and TOKEN not in link, link
    finally:
        hook.cancel_job(job_id)
        harness.delete_topics(stack.kafka_bootstrap, f"{name}-in", f"{name}-out")
    assert hook.wait_for_job_state(job_id, ("CANCELED",), timeout=60).state == "CANCELED"
    # every request of the submission, the trigger and the cancel came with the token, over TLS
    paths = [path for _, path, _ in front.seen]
    assert any(p.startswith("/jars/") and "/run" in p for p in paths), paths  # the PythonDriver run
    assert any(m == "PATCH" for m, _, _ in front.seen), front.seen
    assert all(ok for _, _, ok in front.seen), [s for s in front.seen if not s[2]]
    assert TOKEN not in caplog.text


def test_a_wrong_token_an_unknown_ca_and_basic_auth(
    stack: Any, front: SecuredFront, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow_flink_replay.exceptions import FlinkRestError, FlinkUnreachableError
    from airflow_flink_replay.hooks.flink_rest import FlinkRestHook

    caplog.set_level("DEBUG")
    wrong = "afr-wrong-token-" + harness.unique("w")
    hook = FlinkRestHook(front.connection(monkeypatch, "flink_wrong_token", stack,
                                          extra={"bearer_token": wrong, "verify": str(front.ca)}))  # fmt: skip
    with pytest.raises(FlinkRestError) as err:
        hook.list_jobs()
    assert "401" in str(err.value) and wrong not in str(err.value), str(err.value)
    # the front's certificate is signed by a CA the system does not know: refused, not silently trusted
    hook = FlinkRestHook(front.connection(monkeypatch, "flink_system_ca", stack, extra={"bearer_token": TOKEN}))
    with pytest.raises(FlinkUnreachableError) as err:
        hook.list_jobs()
    assert "CERTIFICATE_VERIFY_FAILED" in str(err.value) or "certificate" in str(err.value).lower(), str(err.value)
    assert TOKEN not in str(err.value)
    # basic auth from the connection's login and password
    hook = FlinkRestHook(front.connection(monkeypatch, "flink_basic", stack, login=USER, password=PASSWORD,
                                          extra={"verify": str(front.ca)}))  # fmt: skip
    assert isinstance(hook.list_jobs().jobs, list)
    assert PASSWORD not in hook.job_ui_url("0" * 32)
    assert TOKEN not in caplog.text and PASSWORD not in caplog.text and wrong not in caplog.text
