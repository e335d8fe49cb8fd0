"""Production's lease in the run storage: one folder per production, one file per generation.

The decisions (who may take it, when it expired) are :mod:`airflow_flink_replay.core.production_lease`'s; this
hook reads and writes the generations where the spec keeps its runs (``runs_uri``), so every Airflow worker
that writes run folders sees the same lease:

- a new generation is created exclusively. On a local or mounted folder it is written to a temporary file
  first and then hard-linked to its name (``link`` fails when the name exists: an exclusive create whose
  content is complete the instant it appears; where hard links are refused, ``O_CREAT|O_EXCL``). On an object
  store it is opened with fsspec's mode ``"xb"`` (S3 turns it into a conditional write); a store that cannot
  create a file exclusively is refused, since a lease there would not exclude a second run.
- its holder alone rewrites it (renewal, release): a temporary file renamed over it locally (readers never see
  half a record), one ``put`` on an object store.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from airflow_flink_replay.core.production_lease import (
    KEEP_GENERATIONS,
    LeaseHolder,
    LeaseRecord,
    Production,
    decide,
    generation_file,
    new_generation,
    of_run,
    parse_generation_file,
    released,
    renewed,
    to_prune,
    utcnow,
)
from airflow_flink_replay.exceptions import (
    ProductionLeaseError,
    ProductionLeaseHeldError,
    ProductionLeaseNotHeldError,
)
from airflow_flink_replay.run_io import run_storage

log = logging.getLogger(__name__)
#: Attempts at reading a generation that does not parse (a file created with ``O_EXCL`` is empty for an instant).
_READ_ATTEMPTS = 5


@dataclass
class Heartbeat:
    """A running renewal of a held lease (:meth:`ProductionLeaseHook.heartbeat`). Whoever releases the lease while
    it runs holds ``lock`` and sets ``stop`` first (:meth:`ProductionLeaseHook.release` with ``beat``), so no
    renewal rewrites a released lease."""

    record: LeaseRecord
    lost: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: why the lease was lost (taken over after it expired, or no longer renewable)
    reason: str = ""


class ProductionLeaseHook:
    """Production's lease below ``lease_dir`` (``<runs_uri>/_leases``).

    :param lease_dir: the folder of every production's lease (a local path or any URI the run storage opens).
    :param production: the production whose lease this is (its folder: ``production.key``).
    :param keep: how many generations are kept as history.
    """

    def __init__(self, lease_dir: str, production: Production, *, keep: int = KEEP_GENERATIONS) -> None:
        self.production = production
        self.folder = run_storage.join(lease_dir, production.key)
        self.keep = keep
        self._store = run_storage.location(self.folder)
        self._local = self._store if isinstance(self._store, Path) else None

    # ------------------------------------------------------------------------------------- reading
    def generations(self) -> list[int]:
        """The generations in the folder, oldest first."""
        if self._local is not None:
            names = [p.name for p in self._local.iterdir()] if self._local.is_dir() else []
        else:
            try:
                names = [str(n) for n in self._store.fs.ls(self._store.path, detail=False)]
            except FileNotFoundError:
                names = []
        return sorted(g for g in (parse_generation_file(n) for n in names) if g is not None)

    def read(self, generation: int) -> LeaseRecord:
        """One generation's record.

        :raises ProductionLeaseError: the file does not hold a lease record (names it and the fix).
        """
        name = generation_file(generation)
        path = run_storage.join(self.folder, name)
        problem = ""
        for attempt in range(_READ_ATTEMPTS):
            try:
                return LeaseRecord.model_validate_json(self._read_bytes(name))
            except (OSError, ValidationError, ValueError) as exc:
                problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                time.sleep(0.05 * (attempt + 1))
        raise ProductionLeaseError(
            f"production's lease file {path} is unreadable ({problem}). Fix: check that no replay run of production "
            f"{self.production.describe()} is stopping it (Flink UI), then delete that file"
        )

    def records(self) -> list[LeaseRecord]:
        """Every kept generation, oldest first."""
        return [self.read(g) for g in self.generations()]

    def current(self) -> LeaseRecord | None:
        """The newest generation (the lease's state), None when the lease was never taken."""
        generations = self.generations()
        return self.read(generations[-1]) if generations else None

    # ------------------------------------------------------------------------------------- holding
    def try_acquire(
        self,
        me: LeaseHolder,
        *,
        ttl_s: float,
        job_id: str | None = None,
        waited_s: float = 0.0,
        check_only: bool = False,
    ) -> tuple[LeaseRecord | None, LeaseRecord | None]:
        """Take the lease once, without waiting: ``(held, None)``, or ``(None, the generation that holds it)``.
        ``check_only``: for a check that never stops production (its generation says so).

        Re-entrant: a run that holds it (another task of the run, an earlier try) renews it."""
        current = self.current()
        now = utcnow()
        decision = decide(current, me, now)
        if decision == "wait":
            return None, current
        if decision == "reenter" and current is not None:
            held = renewed(current, me, ttl_s=ttl_s, now=now, job_id=job_id)
            self._replace(held)
            newer = self._newer_than(held.generation)
            return (held, None) if newer is None else (None, newer)
        record = new_generation(
            current, self.production, me, ttl_s=ttl_s, now=now, waited_s=waited_s, job_id=job_id, check_only=check_only
        )
        if not self._create(record):  # another run created this generation first
            return None, self.current()
        if record.took_over is not None:
            log.warning("took over the expired lease of production %s from %s (expired at %s)",
                        self.production.describe(), record.took_over.describe(),
                        record.took_over_expired_at.isoformat() if record.took_over_expired_at else "?")  # fmt: skip
        self._prune(record.generation)
        return record, None

    def acquire(
        self,
        me: LeaseHolder,
        *,
        ttl_s: float,
        wait_s: float,
        poll_s: float = 2.0,
        job_id: str | None = None,
        on_wait: Callable[[LeaseRecord, float], None] | None = None,
    ) -> LeaseRecord:
        """Take the lease, waiting up to ``wait_s`` seconds while another run holds it.

        ``on_wait(holder, waited_s)`` is called when the wait begins and whenever the holder changes.

        :raises ProductionLeaseHeldError: another run still holds it after ``wait_s``.
        """
        started = time.monotonic()
        seen: tuple[str, int] | None = None
        while True:
            waited = time.monotonic() - started
            held, holder = self.try_acquire(me, ttl_s=ttl_s, job_id=job_id, waited_s=waited)
            if held is not None:
                return held
            if holder is None:  # lost a race to a run that has released it already: try again at once
                continue
            if on_wait is not None and (holder.holder.label, holder.generation) != seen:
                on_wait(holder, waited)
                seen = (holder.holder.label, holder.generation)
            if waited >= wait_s:
                raise ProductionLeaseHeldError(
                    f"production {self.production.describe()} is held by {holder.describe()}",
                    holder=holder, waited_s=waited,
                )  # fmt: skip
            time.sleep(max(0.05, min(poll_s, wait_s - waited)))

    def renew(self, me: LeaseHolder, *, ttl_s: float, job_id: str | None = None) -> LeaseRecord:
        """Extend the lease this run holds (``job_id``: the production job it now stops and resumes).

        :raises ProductionLeaseNotHeldError: this run does not hold it (released, or taken over after it expired).
        """
        current = self.current()
        if current is None or current.released_at is not None or not me.same_run(current.holder):
            raise ProductionLeaseNotHeldError(self._not_held(me, current, "renew"))
        held = renewed(current, me, ttl_s=ttl_s, now=utcnow(), job_id=job_id)
        self._replace(held)
        newer = self._newer_than(held.generation)
        if newer is not None:
            raise ProductionLeaseNotHeldError(self._not_held(me, newer, "renew"))
        return held

    def release(
        self, me: LeaseHolder, *, by: str, savepoint: str | None = None, beat: Heartbeat | None = None
    ) -> LeaseRecord | None:
        """Release the lease this run holds (stopping ``beat``, this process's heartbeat of it, first). Idempotent:
        a generation this run released already is returned as it is; None when this run never held one and nobody
        holds it.

        :raises ProductionLeaseNotHeldError: another run holds the lease (only its holder releases it).
        """
        if beat is not None:
            with beat.lock:
                beat.stop.set()
                return self.release(me, by=by, savepoint=savepoint)
        current = self.current()
        if current is not None and me.same_run(current.holder):
            if current.released_at is not None:
                return current
            done = released(current, by=by, now=utcnow(), savepoint=savepoint)
            self._replace(done)
            return done
        if current is not None and current.held(utcnow()):
            raise ProductionLeaseNotHeldError(self._not_held(me, current, "release"))
        mine = of_run(self.records(), me)
        return mine[-1] if mine and mine[-1].released_at is not None else None

    @contextlib.contextmanager
    def heartbeat(self, me: LeaseHolder, *, ttl_s: float, every_s: float | None = None) -> Iterator[Heartbeat]:
        """Renew the lease this run holds every ``every_s`` seconds (a quarter of the TTL) while the block runs.

        A renewal that finds the lease lost sets ``beat.lost`` and logs why; transient storage errors are logged
        and tried again at the next beat.
        """
        beat = Heartbeat(record=self.renew(me, ttl_s=ttl_s))
        interval = every_s if every_s is not None else max(1.0, ttl_s / 4)

        def run() -> None:
            while not beat.stop.wait(interval):
                try:
                    with beat.lock:
                        if beat.stop.is_set():  # released meanwhile
                            return
                        beat.record = self.renew(me, ttl_s=ttl_s)
                except ProductionLeaseNotHeldError as exc:
                    beat.reason = str(exc)
                    beat.lost.set()
                    log.error("production's lease is lost: %s", exc)
                    return
                except Exception as exc:  # the store was briefly unreachable: the TTL covers a few beats
                    log.warning("renewing production's lease failed (%s: %s); trying again", type(exc).__name__, exc)

        thread = threading.Thread(target=run, name="afr-lease-heartbeat", daemon=True)
        thread.start()
        try:
            yield beat
        finally:
            beat.stop.set()
            thread.join(10)

    # ------------------------------------------------------------------------------------- storage
    def _not_held(self, me: LeaseHolder, current: LeaseRecord | None, what: str) -> str:
        held = f"it is held by {current.describe()}" if current and current.released_at is None else "nobody holds it"
        return (f"run {me.label} cannot {what} the lease of production {self.production.describe()}: {held}; only "
                "its holder renews or releases it")  # fmt: skip

    def _newer_than(self, generation: int) -> LeaseRecord | None:
        """A generation newer than ``generation`` (another run took the lease over meanwhile), or None."""
        newer = [g for g in self.generations() if g > generation]
        return self.read(newer[-1]) if newer else None

    def _read_bytes(self, name: str) -> bytes:
        if self._local is not None:
            return (self._local / name).read_bytes()
        return bytes(self._store.fs.cat_file(f"{self._store.path.rstrip('/')}/{name}"))

    def _create(self, record: LeaseRecord) -> bool:
        """Create ``record``'s generation exclusively; False when it exists already (another run won)."""
        data = record.model_dump_json(indent=2).encode()
        name = generation_file(record.generation)
        if self._local is not None:
            return _create_local(self._local, name, data)
        fs, folder = self._store.fs, self._store.path
        fs.makedirs(folder, exist_ok=True)
        try:
            with fs.open(f"{folder.rstrip('/')}/{name}", "xb") as fh:
                fh.write(data)
        except FileExistsError:
            return False
        except (NotImplementedError, ValueError, TypeError) as exc:
            raise ProductionLeaseError(
                f"the run storage {self.folder} cannot create a file exclusively (fsspec mode 'xb': "
                f"{type(exc).__name__}: {exc}), so a lease there would not keep a second run from stopping "
                "production. Fix: put runs_uri on a local or shared folder, or a store with conditional writes (S3)"
            ) from exc
        return True

    def _replace(self, record: LeaseRecord) -> None:
        """Rewrite the holder's own generation in one step."""
        data = record.model_dump_json(indent=2).encode()
        name = generation_file(record.generation)
        if self._local is not None:
            tmp = self._local / f".{name}.{uuid.uuid4().hex}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, self._local / name)
            return
        self._store.fs.pipe_file(f"{self._store.path.rstrip('/')}/{name}", data)

    def _prune(self, newest: int) -> None:
        """Remove the generations older than the kept history (best effort: a leftover is only history)."""
        for generation in to_prune([g for g in self.generations() if g <= newest], self.keep):
            name = generation_file(generation)
            with contextlib.suppress(OSError):
                if self._local is not None:
                    (self._local / name).unlink(missing_ok=True)
                else:
                    self._store.fs.rm_file(f"{self._store.path.rstrip('/')}/{name}")


def _create_local(folder: Path, name: str, data: bytes) -> bool:
    """Exclusive create in a local folder: the complete record hard-linked to its name (``O_EXCL`` where links are
    refused); False when the name exists."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.{uuid.uuid4().hex}.tmp"
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, folder / name)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            return _create_exclusive(folder / name, data)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def _create_exclusive(path: Path, data: bytes) -> bool:
    """``O_CREAT|O_EXCL`` then write (readers retry a record that is briefly empty)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return True
