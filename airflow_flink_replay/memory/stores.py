"""Vector-store adapters for the Mem0 namespace fork: read and write payloads AND stored vectors.

mem0 has no export/import, and its ``VectorStoreBase.list`` returns payloads without vectors, so the fork
works one level down, on the client objects mem0 itself built (``memory.vector_store``):

* :class:`ChromaAdapter` — ``collection.get(where=…, include=["embeddings", "metadatas", "documents"])``
  paged, ``collection.upsert`` in batches of the server's max batch size (embedded or HTTP server).
* :class:`QdrantAdapter` — ``scroll(with_vectors=True)`` and ``upsert`` of the stored vectors verbatim
  (mem0's dense vector ``""`` and, when present, its ``bm25`` sparse vector), ``retrieve``, ``delete``.
* :class:`GenericMem0Adapter` — any other mem0 store through ``VectorStoreBase`` (``list``/``get``/
  ``insert``/``delete``). Vectors come from the store where it exposes them (FAISS: ``index.reconstruct``,
  items carrying a ``vector``); a store that hides them can only be forked with ``reembed=True``, which
  re-embeds the text with the configured embedder (identical vectors only for a deterministic embedder;
  the result says so).

Hosted Mem0 (``MemoryClient``, the platform) is a different backend, not a vector store: see
:mod:`.hosted` (export with ``get_all`` + re-add with ``add(infer=False)``). The fork itself (markers,
history, cleanup) is :class:`~.oss.OssMem0Backend` over these adapters; the errors below are raised by
both backends.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from airflow_flink_replay.exceptions import ForkConflictError as ForkConflictError
from airflow_flink_replay.exceptions import NotAForkError as NotAForkError

logger = logging.getLogger(__name__)

DEFAULT_BATCH = 5000


@dataclass
class StoredMemory:
    """One record as the store holds it: id, payload (mem0 metadata) and the store-native vector."""

    id: str
    payload: dict[str, Any]
    vector: Any = None
    document: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def dense(self) -> list[float] | None:
        """The dense embedding as a list of floats (Qdrant named vectors: the default ``""`` vector)."""
        vec = self.vector
        if vec is None:
            return None
        if isinstance(vec, Mapping):
            vec = vec.get("", next((v for v in vec.values() if isinstance(v, list | tuple)), None))
            if vec is None:
                return None
        if hasattr(vec, "tolist"):
            vec = vec.tolist()
        return [float(v) for v in vec]


class StoreAdapter(ABC):
    """Bulk access to one mem0 collection, vectors included."""

    #: mem0 provider name (``chroma``, ``qdrant``, …).
    provider: str = ""
    #: True when :meth:`iter_where` returns the vectors the store holds (no re-embedding).
    exact_vectors: bool = True
    #: True when the client may read and write from two threads at once (the fork then overlaps them).
    concurrent_io: bool = False
    #: records per read page while copying (None: the batch size; small: the first write starts sooner)
    copy_read_page: int | None = None
    #: records per :meth:`insert` while copying (None: one per page read; never above the batch size),
    #: and how many are in flight at once (only where ``concurrent_io``)
    copy_write_chunk: int | None = None
    copy_write_workers: int = 1

    def __init__(self, memory: Any, batch_size: int = DEFAULT_BATCH) -> None:
        self.memory = memory
        self.vector_store = memory.vector_store
        self.batch_size = batch_size

    @property
    def collection(self) -> str:
        """Collection (index) name."""
        return str(getattr(self.vector_store, "collection_name", "") or "")

    @abstractmethod
    def iter_where(
        self, filters: Mapping[str, str], *, with_vectors: bool = True, page_size: int | None = None
    ) -> Iterator[list[StoredMemory]]:
        """Yield batches (of ``page_size``, default the batch size) of the records whose payload equals
        every ``filters`` item."""

    @abstractmethod
    def get_ids(self, ids: Sequence[str], *, with_vectors: bool = False) -> list[StoredMemory]:
        """The records with these ids (missing ids are left out)."""

    @abstractmethod
    def insert(self, records: Sequence[StoredMemory]) -> None:
        """Write records (insert or overwrite by id), payloads and vectors as given."""

    @abstractmethod
    def delete_ids(self, ids: Sequence[str]) -> None:
        """Delete records by id (absent ids are ignored)."""

    def ids_where(self, filters: Mapping[str, str]) -> set[str]:
        """The ids of the records matching ``filters`` (no payloads, no vectors where the store allows)."""
        return {r.id for b in self.iter_where(filters, with_vectors=False) for r in b}

    def make_vector(self, dense: Sequence[float]) -> Any:
        """A store-native vector from a dense list (used for marker records)."""
        return [float(v) for v in dense]

    def canonical_vector(self, dense: list[float] | None) -> list[float] | None:
        """The vector as fingerprints digest it (the stored bits, unless the store rewrites them)."""
        return dense

    def count(self, filters: Mapping[str, str]) -> int:
        """Number of records matching ``filters``."""
        return sum(len(b) for b in self.iter_where(filters, with_vectors=False))

    def dims(self) -> int:
        """Embedding dimension of the collection (from the embedder config)."""
        emb = getattr(self.memory, "embedding_model", None)
        dims = getattr(getattr(emb, "config", None), "embedding_dims", None)
        if not dims:
            raise ValueError("embedder.config.embedding_dims: set the embedding dimension in the mem0 config")
        return int(dims)


def _chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


class ChromaAdapter(StoreAdapter):
    """Chroma (embedded ``path=`` or HTTP server ``host``/``port``)."""

    provider = "chroma"
    #: concurrent write requests per insert (measured faster than one on the 2-core stack machine)
    write_workers = 2
    concurrent_io = True
    #: the fork's copy: the server applies writes one at a time and each request has a fixed cost, so few
    #: large inserts (one in flight, the next page read meanwhile) beat many small concurrent ones
    #: (measured at 10k on one collection: 5,000 x 1 in flight 5.9 s, 2,500 x 2 6.4 s, 1,000 x 3 8.2 s)
    copy_read_page = 1000
    copy_write_chunk = 5000
    copy_write_workers = 1

    def __init__(self, memory: Any, batch_size: int = DEFAULT_BATCH) -> None:
        super().__init__(memory, batch_size)
        self.col = self.vector_store.collection
        try:
            max_batch = int(self.vector_store.client.get_max_batch_size())
        except Exception:  # older clients / embedded settings without the call
            max_batch = batch_size
        self.write_batch = max(1, min(batch_size, max_batch))

    @staticmethod
    def where(filters: Mapping[str, str]) -> dict[str, Any] | None:
        """Chroma ``where`` for equality on every item."""
        clauses = [{k: {"$eq": v}} for k, v in filters.items()]
        if not clauses:
            return None
        return clauses[0] if len(clauses) == 1 else {"$and": clauses}

    def _records(self, got: Mapping[str, Any], with_vectors: bool) -> list[StoredMemory]:
        ids = got.get("ids") or []
        metas = got.get("metadatas")
        docs = got.get("documents")
        embs = got.get("embeddings") if with_vectors else None
        out = []
        for i, mid in enumerate(ids):
            vec = None
            if embs is not None:
                vec = embs[i].tolist() if hasattr(embs[i], "tolist") else list(embs[i])
            out.append(
                StoredMemory(
                    id=mid,
                    payload=dict(metas[i] or {}) if metas is not None else {},
                    vector=vec,
                    document=docs[i] if docs is not None else None,
                )
            )
        return out

    def iter_where(
        self, filters: Mapping[str, str], *, with_vectors: bool = True, page_size: int | None = None
    ) -> Iterator[list[StoredMemory]]:
        """The matching ids first (one light query), then the records by id, a page at a time, the filter
        checked again on each payload (a record that left the namespace meanwhile is not returned).
        ``limit``/``offset`` paging would re-run the filtered query and skip ``offset`` rows for every
        page, which makes small pages — what lets the fork's first write start early — quadratic; and a
        ``get`` by ids *with* a ``where`` is Chroma's slow path (measured ~25x slower than by ids alone)."""
        include = ["metadatas", "documents"] + (["embeddings"] if with_vectors else [])
        ids = self.col.get(where=self.where(filters), include=[])["ids"]
        for chunk in _chunks(ids, page_size or self.batch_size):
            got = self._records(self.col.get(ids=list(chunk), include=include), with_vectors)
            batch = [r for r in got if all(r.payload.get(k) == v for k, v in filters.items())]
            if batch:
                yield batch

    def ids_where(self, filters: Mapping[str, str]) -> set[str]:
        return set(self.col.get(where=self.where(filters), include=[])["ids"])

    def get_ids(self, ids: Sequence[str], *, with_vectors: bool = False) -> list[StoredMemory]:
        if not ids:
            return []
        include = ["metadatas", "documents"] + (["embeddings"] if with_vectors else [])
        return self._records(self.col.get(ids=list(ids), include=include), with_vectors)

    def _upsert(self, chunk: Sequence[StoredMemory]) -> None:
        docs = [r.document for r in chunk]
        kwargs: dict[str, Any] = {
            "ids": [r.id for r in chunk],
            "embeddings": [r.dense() for r in chunk],
            "metadatas": [r.payload for r in chunk],
        }
        if any(d is not None for d in docs):
            kwargs["documents"] = [d if d is not None else "" for d in docs]
        self.col.upsert(**kwargs)

    def insert(self, records: Sequence[StoredMemory]) -> None:
        """Upsert in chunks; ``write_workers`` concurrent requests (the server indexes in parallel)."""
        chunks = list(_chunks(records, max(1, min(self.write_batch, -(-len(records) // self.write_workers)))))
        if len(chunks) <= 1 or self.write_workers <= 1:
            for chunk in chunks:
                self._upsert(chunk)
            return
        with ThreadPoolExecutor(self.write_workers) as pool:
            for future in [pool.submit(self._upsert, c) for c in chunks]:
                future.result()

    def delete_ids(self, ids: Sequence[str]) -> None:
        for chunk in _chunks(list(ids), self.write_batch):
            self.col.delete(ids=list(chunk))

    def count(self, filters: Mapping[str, str]) -> int:
        return len(self.ids_where(filters))


class QdrantAdapter(StoreAdapter):
    """Qdrant (embedded ``path=``, server or cloud): stored vectors copied verbatim, sparse ones too.

    Cosine collections (mem0's default) re-normalise every written vector in float32. A stored vector
    whose float32 norm is not exactly 1 comes back from any write — the fork's copy, or re-adding the
    memory through mem0 — moved by at most one ulp (relative 6e-8) in some components; that is the
    store's rounding, not a change of content. qdrant-client's *local* mode even re-normalises stored
    vectors in place when it searches. Fingerprints therefore digest a canonical point of float32
    re-normalisation (:meth:`canonical_vector`): its fixed point or — float32 re-normalisation does not
    always converge, some vectors alternate between 2 or 4 bit patterns — the smallest member of the
    cycle it enters, whichever phase the stored vector is in. A real change of a vector still changes
    the digest. Rewriting an existing point is a write: qdrant-client's local mode normalises an updated
    point in float64 (a new one in float32), so a memory written again with its own vector may land a few
    ulp off that cycle and be reported as changed.
    """

    provider = "qdrant"

    def __init__(self, memory: Any, batch_size: int = DEFAULT_BATCH) -> None:
        super().__init__(memory, batch_size)
        from qdrant_client import models

        self.models = models
        self.client = self.vector_store.client
        self.write_batch = min(batch_size, 2000)
        self._is_cosine: bool | None = None

    def _filter(self, filters: Mapping[str, str]) -> Any:
        m = self.models
        if not filters:
            return None
        return m.Filter(must=[m.FieldCondition(key=k, match=m.MatchValue(value=v)) for k, v in filters.items()])

    @staticmethod
    def _rec(point: Any) -> StoredMemory:
        return StoredMemory(id=str(point.id), payload=dict(point.payload or {}), vector=point.vector)

    def iter_where(
        self, filters: Mapping[str, str], *, with_vectors: bool = True, page_size: int | None = None
    ) -> Iterator[list[StoredMemory]]:
        offset = None
        while True:
            points, offset = self.client.scroll(
                collection_name=self.collection,
                scroll_filter=self._filter(filters),
                limit=page_size or self.batch_size,
                offset=offset,
                with_payload=True,
                with_vectors=with_vectors,
            )
            if points:
                yield [self._rec(p) for p in points]
            if offset is None or not points:
                return

    def get_ids(self, ids: Sequence[str], *, with_vectors: bool = False) -> list[StoredMemory]:
        if not ids:
            return []
        points = self.client.retrieve(
            collection_name=self.collection, ids=list(ids), with_payload=True, with_vectors=with_vectors
        )
        return [self._rec(p) for p in points]

    def insert(self, records: Sequence[StoredMemory]) -> None:
        m = self.models
        for chunk in _chunks(records, self.write_batch):
            points = [m.PointStruct(id=r.id, vector=r.vector, payload=r.payload) for r in chunk]
            self.client.upsert(collection_name=self.collection, points=points, wait=True)

    def delete_ids(self, ids: Sequence[str]) -> None:
        m = self.models
        for chunk in _chunks(list(ids), self.write_batch):
            self.client.delete(
                collection_name=self.collection, points_selector=m.PointIdsList(points=list(chunk)), wait=True
            )

    def make_vector(self, dense: Sequence[float]) -> Any:
        return {"": [float(v) for v in dense]}

    def _cosine(self) -> bool:
        if self._is_cosine is None:
            params = self.client.get_collection(self.collection).config.params.vectors
            if isinstance(params, Mapping):
                params = params.get("")
            self._is_cosine = getattr(params, "distance", None) == self.models.Distance.COSINE
        return bool(self._is_cosine)

    def canonical_vector(self, dense: list[float] | None) -> list[float] | None:
        """Cosine collections: fixed point or cycle minimum of float32 re-normalisation (class docstring)."""
        if dense is None or not self._cosine():
            return dense
        import numpy as np

        vec = np.asarray([dense], dtype=np.float32)
        seen: dict[bytes, int] = {}
        orbit: list[Any] = []
        for step in range(64):
            key = vec.tobytes()
            if key in seen:  # a fixed point (cycle of 1) or a cycle: its smallest member, whatever the phase
                vec = min(orbit[seen[key] :], key=lambda v: v.tobytes())
                break
            seen[key] = step
            orbit.append(vec)
            norm = np.linalg.norm(vec, axis=-1)[:, np.newaxis]
            vec = (vec / np.where(norm != 0.0, norm, np.float32(1e-12))).astype(np.float32, copy=False)
        return [float(v) for v in vec[0]]

    def count(self, filters: Mapping[str, str]) -> int:
        return int(
            self.client.count(collection_name=self.collection, count_filter=self._filter(filters), exact=True).count
        )


class GenericMem0Adapter(StoreAdapter):
    """Fallback over mem0's ``VectorStoreBase`` for stores without a dedicated adapter (FAISS, …).

    Reads with ``list(filters, top_k)`` (one call, ``top_k`` = ``list_limit``), writes with ``insert`` and
    deletes one id at a time (FAISS: in bulk, below). Vectors: from ``index.reconstruct`` (FAISS) or a
    ``vector`` attribute of the listed items; otherwise the fork is refused unless ``reembed=True``.

    FAISS (mem0's ``FAISS`` store: a flat index plus ``docstore``/``index_to_id`` maps) gets two bulk
    paths, because mem0's own ``delete`` rebuilds the whole index and rewrites the docstore per id
    (quadratic: ~30 s to drop 1,000 forked memories) and its ``insert`` appends a second index entry
    for an id that exists already: :meth:`delete_ids` rebuilds the index once for all ids, and
    :meth:`insert` removes existing ids first (insert-or-overwrite, like the other adapters).
    """

    def __init__(
        self, memory: Any, batch_size: int = DEFAULT_BATCH, *, reembed: bool = False, list_limit: int = 10_000_000
    ) -> None:
        super().__init__(memory, batch_size)
        self.provider = str(memory.config.vector_store.provider)
        self.reembed = reembed
        self.list_limit = list_limit
        self.exact_vectors = not reembed

    @staticmethod
    def _items(listed: Any) -> list[Any]:
        """Normalise the shapes ``VectorStoreBase.list`` returns (``[[items]]``, ``(items, offset)``)."""
        if isinstance(listed, tuple):
            listed = listed[0]
        if listed and isinstance(listed[0], list | tuple):
            listed = listed[0]
        return list(listed or [])

    def _faiss_like(self) -> bool:
        """True for mem0's FAISS store (flat index with ``reconstruct`` and its id maps)."""
        vs = self.vector_store
        return (
            hasattr(getattr(vs, "index", None), "reconstruct")
            and isinstance(getattr(vs, "docstore", None), dict)
            and isinstance(getattr(vs, "index_to_id", None), dict)
            and callable(getattr(vs, "_save", None))
        )

    def _id_to_index(self) -> dict[str, int]:
        return {str(v): int(k) for k, v in (getattr(self.vector_store, "index_to_id", None) or {}).items()}

    def _vector_of(self, item: Any, id_to_index: Mapping[str, int] | None = None) -> Any:
        vec = getattr(item, "vector", None)
        if vec is not None:
            return vec
        index = getattr(self.vector_store, "index", None)
        if index is not None and hasattr(index, "reconstruct"):
            positions = id_to_index if id_to_index is not None else self._id_to_index()
            if str(item.id) in positions:
                return index.reconstruct(positions[str(item.id)]).tolist()
        if self.reembed:
            payload = item.payload or {}
            return self.memory.embedding_model.embed(payload.get("data", ""), "add")
        raise NotImplementedError(
            f"vector store {self.provider!r}: mem0's interface does not expose stored vectors; fork with "
            "reembed=True (re-embeds the text, identical only for a deterministic embedder) or add an adapter"
        )

    def iter_where(
        self, filters: Mapping[str, str], *, with_vectors: bool = True, page_size: int | None = None
    ) -> Iterator[list[StoredMemory]]:
        items = self._items(self.vector_store.list(filters=dict(filters) or None, top_k=self.list_limit))
        positions = self._id_to_index() if with_vectors else None
        records = [
            StoredMemory(
                id=str(it.id),
                payload=dict(it.payload or {}),
                vector=self._vector_of(it, positions) if with_vectors else None,
            )
            for it in items
        ]
        for chunk in _chunks(records, page_size or self.batch_size):
            yield list(chunk)

    def get_ids(self, ids: Sequence[str], *, with_vectors: bool = False) -> list[StoredMemory]:
        out = []
        positions = self._id_to_index() if with_vectors else None
        for mid in ids:
            try:
                item = self.vector_store.get(vector_id=mid)
            except Exception:  # stores differ: some raise for a missing id, some return None
                item = None
            if item is None or getattr(item, "payload", None) is None:
                continue
            vec = self._vector_of(item, positions) if with_vectors else None
            out.append(StoredMemory(id=str(item.id), payload=dict(item.payload), vector=vec))
        return out

    def insert(self, records: Sequence[StoredMemory]) -> None:
        if self._faiss_like():
            present = [r.id for r in records if r.id in self.vector_store.docstore]
            if present:
                self._faiss_delete(present)
        for chunk in _chunks(records, self.batch_size):
            self.vector_store.insert(
                vectors=[r.vector for r in chunk],
                payloads=[r.payload for r in chunk],
                ids=[r.id for r in chunk],
            )

    def _faiss_delete(self, ids: Sequence[str]) -> None:
        """Delete many ids from mem0's FAISS store with one index rebuild and one save."""
        import numpy as np

        vs = self.vector_store
        drop = {str(i) for i in ids}
        positions = sorted(int(k) for k in vs.index_to_id)
        keep = [k for k in positions if str(vs.index_to_id[k]) not in drop]
        if len(keep) == len(positions) and not drop & set(vs.docstore):
            return
        total = int(vs.index.ntotal)
        every = vs.index.reconstruct_n(0, total) if total else np.zeros((0, 0), dtype=np.float32)
        kept = np.asarray([every[k] for k in keep if k < total], dtype=np.float32)
        vs.index.reset()
        if len(kept):
            vs.index.add(kept)
        vs.index_to_id = {new: vs.index_to_id[old] for new, old in enumerate(k for k in keep if k < total)}
        for mid in drop:
            vs.docstore.pop(mid, None)
        vs._save()

    def delete_ids(self, ids: Sequence[str]) -> None:
        if not ids:
            return
        if self._faiss_like():
            self._faiss_delete(ids)
            return
        for mid in ids:
            try:
                self.vector_store.delete(vector_id=mid)
            except Exception as exc:  # absent id: ignore, as the other adapters do
                logger.debug("delete %s: %s", mid, exc)


ADAPTERS: dict[str, type[StoreAdapter]] = {"chroma": ChromaAdapter, "qdrant": QdrantAdapter}


def adapter_for(
    memory: Any, *, batch_size: int = DEFAULT_BATCH, adapter: str = "auto", reembed: bool = False
) -> StoreAdapter:
    """Pick the adapter for ``memory``'s vector store (``adapter``: ``auto``, ``generic`` or a provider)."""
    provider = str(memory.config.vector_store.provider)
    name = provider if adapter == "auto" else adapter
    if name == "generic" or name not in ADAPTERS:
        if adapter not in ("auto", "generic"):
            raise ValueError(f"store_adapter: unknown adapter {adapter!r}; use auto, generic, {', '.join(ADAPTERS)}")
        return GenericMem0Adapter(memory, batch_size, reembed=reembed)
    if name != provider:
        raise ValueError(f"store_adapter: {name!r} does not fit the configured vector store {provider!r}")
    return ADAPTERS[name](memory, batch_size)


def chroma_server_view(config: Mapping[str, Any], dims: int) -> Any | None:
    """What the Chroma adapter reads of a ``mem0.Memory`` — the client and collection mem0 builds for a
    Chroma *server*, the history path, the embedding dimension — built with chromadb alone.

    ``config`` is the offline mem0 config (:func:`~airflow_flink_replay.memory.offline.offline_memory_config`).
    A fork, pre-copy, drop or fingerprint works on stored vectors and never embeds, so it needs no mem0:
    importing it and building a Memory cost a fresh task process 2.5-4.5 s (measured under the LocalExecutor,
    more with two Mem0 tasks at once on 2 cores). The client is configured as mem0's own ``ChromaDB`` does
    it (server settings, ``get_or_create_collection`` without an embedding function). ``None`` for
    anything else (an embedded Chroma path, Chroma Cloud, another store): build the Memory then.
    """
    vs = config.get("vector_store") or {}
    conf = dict(vs.get("config") or {})
    if vs.get("provider") != "chroma" or not (conf.get("host") and conf.get("port")):
        return None
    if conf.get("client") or conf.get("api_key") or conf.get("tenant") or conf.get("path"):
        return None
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    settings.chroma_server_host = conf["host"]
    settings.chroma_server_http_port = conf["port"]
    settings.chroma_api_impl = "chromadb.api.fastapi.FastAPI"
    client = chromadb.Client(settings)
    name = str(conf.get("collection_name") or "mem0")  # mem0's default collection name
    collection = client.get_or_create_collection(name=name, embedding_function=None)
    return SimpleNamespace(
        config=SimpleNamespace(vector_store=SimpleNamespace(provider="chroma", config=conf),
                               history_db_path=config.get("history_db_path")),
        vector_store=SimpleNamespace(client=client, collection=collection, collection_name=name),
        embedding_model=SimpleNamespace(config=SimpleNamespace(embedding_dims=dims)),
    )
