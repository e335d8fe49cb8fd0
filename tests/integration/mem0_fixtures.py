"""Helpers for the Mem0 fork tests: store configs (stack Chroma / embedded Qdrant / FAISS) and seeding.

Real mem0 (offline hashing embedder), real Chroma server of the local stack, real embedded Qdrant, real
FAISS (mem0's ``faiss`` store, through the generic adapter). Seeding: part of the memories through
``Memory.add(infer=False)`` (mem0's own layout and history rows), the rest in bulk through mem0's own
``vector_store.insert`` with the payload ``Memory.add`` writes (``data``, ``hash``, ``created_at``,
``updated_at``, scope fields), to keep the tests fast. The bulk-seeded memories get a stored vector that
is NOT what the embedder gives for their text (:func:`stored_vector`, as after an embedder upgrade): a
fork that re-embedded instead of copying would change them, and :func:`embedder_forbidden` makes any
embedding call fail outright.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_flink_replay.memory.offline import hashing_embed

TOPICS = [
    "green tea", "espresso", "window seat", "aisle seat", "vegetarian meals", "peanut allergy",
    "late checkout", "early flights", "red bicycle", "jazz concerts", "python code", "mountain hikes",
]  # fmt: skip


def text_for(i: int) -> str:
    """A memory text; texts of the same topic share words, so search has something to find."""
    topic = TOPICS[i % len(TOPICS)]
    return f"customer {i % 97} prefers {topic} (note {i})"


def stored_vector(text: str, i: int) -> list[float]:
    """A unit vector near the embedder's vector of ``text`` but not equal to it (unique per ``i``).

    Close enough that search by topic still works, different enough (cosine ~0.97) that a re-embedded
    copy is far from bit-identical.
    """
    base, noise = hashing_embed(text), hashing_embed(f"stored-variant {i}")
    vec = [a + 0.25 * b for a, b in zip(base, noise, strict=True)]
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec]


@contextlib.contextmanager
def embedder_forbidden(memory: Any) -> Iterator[None]:
    """Make every embedding call of ``memory`` raise (a fork must copy stored vectors, never embed)."""
    model = memory.embedding_model

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the embedder was called during a fork: vectors must be copied, not re-embedded")

    saved = {name: model.__dict__.get(name) for name in ("embed", "embed_batch")}
    model.embed = refuse
    model.embed_batch = refuse
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                model.__dict__.pop(name, None)
            else:
                setattr(model, name, value)


def store_config(provider: str, tmp_path: Path, chroma_host: str, chroma_port: int) -> dict[str, Any]:
    """A mem0 config for a fresh, unique collection (Chroma server) or a fresh embedded Qdrant/FAISS folder."""
    collection = f"afr_test_{uuid.uuid4().hex[:12]}"
    if provider == "chroma":
        vs = {"provider": "chroma", "config": {"host": chroma_host, "port": chroma_port, "collection_name": collection}}
    elif provider == "qdrant":
        vs = {"provider": "qdrant", "config": {"path": str(tmp_path / "qdrant"), "collection_name": collection}}
    elif provider == "faiss":
        vs = {"provider": "faiss", "config": {"path": str(tmp_path / "faiss"), "collection_name": collection}}
    else:
        raise ValueError(provider)
    return {"vector_store": vs, "history_db_path": str(tmp_path / "history.db")}


def drop_collection(memory: Any) -> None:
    """Remove the test collection (Chroma server is shared by everyone)."""
    with contextlib.suppress(Exception):  # already gone / embedded store in a tmp dir
        memory.vector_store.delete_col()


def seed(memory: Any, user_id: str, n: int, *, via_add: int, keys: int = 25, run_id: str = "ltm") -> None:
    """``n`` memories in ``user_id`` across ``keys`` agent ids; the first ``via_add`` through Memory.add
    (embedder's vectors), the rest in bulk with :func:`stored_vector` (not the embedder's)."""
    for i in range(via_add):
        memory.add(text_for(i), user_id=user_id, agent_id=f"key-{i % keys}", run_id=run_id, infer=False)
    base = datetime(2026, 11, 1, tzinfo=UTC)
    vectors, payloads, ids = [], [], []
    for i in range(via_add, n):
        text = text_for(i)
        ts = (base + timedelta(seconds=i)).isoformat()
        payloads.append(
            {
                "data": text,
                "hash": hashlib.md5(text.encode()).hexdigest(),
                "created_at": ts,
                "updated_at": ts,
                "user_id": user_id,
                "agent_id": f"key-{i % keys}",
                "run_id": run_id,
                "text_lemmatized": text,
            }
        )
        vectors.append(stored_vector(text, i))
        ids.append(str(uuid.uuid4()))
    for start in range(0, len(ids), 1000):
        memory.vector_store.insert(
            vectors=vectors[start : start + 1000],
            payloads=payloads[start : start + 1000],
            ids=ids[start : start + 1000],
        )


class CuttableTcpProxy:
    """A TCP proxy in front of the stack's Chroma server that can lose the network, as a flaky link does.

    Forwards bytes both ways (one thread per direction and connection). When the ``cut_at``-th request
    whose request line names ``cut_on`` (e.g. ``/upsert``) arrives, it is not forwarded. With
    ``stay_down`` (an outage) every open connection is closed and the listening socket too, so the client
    gets "server disconnected" for what was in flight and "connection refused" for anything after, until
    :meth:`restore` listens on the same port again (the link comes back). Without it (a blip) only that
    request's connection is closed and everything after is forwarded. ``seen`` counts the matching
    requests, ``forwarded`` those that went through.
    """

    def __init__(
        self, host: str, port: int, *, cut_on: bytes = b"/upsert", cut_at: int | None = None, stay_down: bool = True
    ) -> None:
        self.upstream = (host, port)
        self.cut_on, self.cut_at, self.stay_down = cut_on, cut_at, stay_down
        self.seen = self.forwarded = 0
        self.is_cut = False
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._serve()

    def _serve(self) -> None:
        listener = self._listener

        def accept_loop() -> None:
            listener.settimeout(0.1)
            while not self.is_cut:
                try:
                    client, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:  # closed by cut()/close()
                    return
                upstream = socket.create_connection(self.upstream)
                with self._lock:
                    self._conns += [client, upstream]
                threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
                threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

        threading.Thread(target=accept_loop, daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_client and data.startswith((b"POST ", b"PUT ")) and self.cut_on in data.split(b"\r\n", 1)[0]:
                    with self._lock:
                        self.seen += 1
                        cut_now = self.cut_at is not None and self.seen >= self.cut_at
                        self.forwarded += not cut_now
                        if cut_now and not self.stay_down:
                            self.cut_at = None  # a blip: this request's connection only
                    if cut_now:
                        if self.stay_down:
                            self.cut()
                        return  # (finally: closes this connection)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Lose the link: close every connection and stop listening (new connections are refused)."""
        with self._lock:
            self.is_cut = True
            conns, self._conns = self._conns, []
        for s in [self._listener, *conns]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def restore(self) -> None:
        """The link comes back: listen on the same port again, forward everything from now on."""
        self.cut_at = None
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self.is_cut = False
        self._serve()

    def close(self) -> None:
        self.cut()
