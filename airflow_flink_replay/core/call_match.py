"""Matching a replayed call with production's recorded calls when a model wrote some of its arguments.

An agent's chat model writes tool arguments: ``notify_support(review_id, customer, reason)`` gets a ``reason`` the
model worded, and a model that samples words it differently in every run. Matched on the digest of all its
arguments, such a call is served production's result at random (whenever the wording happens to repeat), in the
baselines and the candidate alike — and the side-effect comparison then sees calls flip between served and
unmatched. So a call's arguments are told apart:

- **identifying** arguments (ids, keys, amounts, short codes) must be equal;
- **free text** (natural language) is scored by similarity (0..1, :func:`text_similarity`) and never has to be
  equal; a declared ``min_similarity`` may require a score.

Which is which, per resource and method: declared in the policy
(:class:`~airflow_flink_replay.core.policy.CallMatch`, ``ReplayPolicy.call_match``), else inferred from
production's recording (:func:`infer_rule`): a string argument is free text when most of production's values of
it are natural language (:func:`is_free_text`: at least :data:`FREE_TEXT_MIN_WORDS` words and
:data:`FREE_TEXT_MIN_CHARS` characters); everything else identifies.

Every top-level argument is digested on its own (a keyword argument by its name, a positional one as
``args[<i>]``), and string arguments keep their text (the first :data:`ARG_TEXT_CHARS` characters; none for
secret-looking names), with the namespace read as its placeholder as in the whole digest
(:func:`~airflow_flink_replay.core.audit.args_digest`). Pure: no Flink, no Airflow; rapidfuzz scores the text
(both sides have it: the ``flink`` extra lists it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz import fuzz

from airflow_flink_replay.core.audit import args_digest, masked
from airflow_flink_replay.core.policy import CallMatch

__all__ = [
    "ARG_TEXT_CHARS",
    "FREE_TEXT_MIN_CHARS",
    "FREE_TEXT_MIN_WORDS",
    "CallArguments",
    "MatchRule",
    "infer_rule",
    "is_free_text",
    "text_similarity",
]

#: Characters of a string argument kept (in a cassette entry, in the replay) to score free text.
ARG_TEXT_CHARS = 2000
#: A string is natural language (free text by default) with at least this many words …
FREE_TEXT_MIN_WORDS = 3
#: … and at least this many characters: ids, codes, URLs, names and amounts are single words or short.
FREE_TEXT_MIN_CHARS = 20

def text_similarity(a: str, b: str) -> float:
    """Similarity of two texts, 0..1: rapidfuzz's normalised Indel similarity (``fuzz.ratio``)."""
    return 1.0 if a == b else float(fuzz.ratio(a, b)) / 100.0


def is_free_text(text: str) -> bool:
    """Whether a string argument reads as natural language (a sentence a model wrote) rather than an identifier."""
    return len(text) >= FREE_TEXT_MIN_CHARS and len(text.split()) >= FREE_TEXT_MIN_WORDS


def _secret(name: str) -> bool:
    """Whether an argument's name looks secret (the audit preview masks the same names): its text is never kept."""
    return masked({name: None})[name] is not None


def _named(args: Any, kwargs: Any) -> dict[str, Any]:
    named = {f"args[{i}]": value for i, value in enumerate(args or ())}
    named.update(kwargs or {})
    return named


@dataclass(frozen=True)
class CallArguments:
    """One call's arguments as matching needs them: the whole digest, a digest per top-level argument, and the
    (bounded) text of each string argument."""

    digest: str
    digests: dict[str, str] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, args: Any = (), kwargs: Any = None, replace: Mapping[str, str] | None = None) -> CallArguments:
        """Digest and read ``args``/``kwargs`` (``replace``: as for
        :func:`~airflow_flink_replay.core.audit.args_digest`)."""
        named = _named(args, kwargs)
        digests = {name: args_digest((), {name: value}, replace) for name, value in named.items()}
        texts = {}
        for name, value in named.items():
            if isinstance(value, str) and not _secret(name):
                for token, placeholder in (replace or {}).items():
                    value = value.replace(token, placeholder) if token else value
                texts[name] = value[:ARG_TEXT_CHARS]
        return cls(digest=args_digest(args, kwargs, replace), digests=digests, texts=texts)


@dataclass(frozen=True)
class MatchRule:
    """Which arguments of one resource's calls are free text: declared (``identify`` / ``free_text``) or inferred."""

    identify: frozenset[str] | None = None
    free_text: frozenset[str] = frozenset()
    min_similarity: float = 0.0
    #: ``spec`` (declared in the policy), ``inferred`` (from production's recording) or ``none``
    source: str = "none"

    @classmethod
    def declared(cls, spec: CallMatch) -> MatchRule:
        """The rule a policy's :class:`~airflow_flink_replay.core.policy.CallMatch` declares."""
        identify = frozenset(spec.identify) if spec.identify is not None else None
        return cls(identify, frozenset(spec.free_text), spec.min_similarity, "spec")

    @property
    def has_free_text(self) -> bool:
        """Whether some argument may be free text (else only an exact match serves a call)."""
        return bool(self.free_text) or self.identify is not None

    def is_free(self, name: str) -> bool:
        """Whether argument ``name`` is free text under this rule."""
        return name in self.free_text or (self.identify is not None and name not in self.identify)

    def identity(self, digests: Mapping[str, str]) -> dict[str, str]:
        """The identifying arguments' digests."""
        return {name: digest for name, digest in digests.items() if not self.is_free(name)}

    def identity_digest(self, call: CallArguments) -> str:
        """One digest of the call's identifying arguments (what the side-effect comparison compares exactly)."""
        return args_digest((), self.identity(call.digests))

    def similarity(self, call: CallArguments, digests: Mapping[str, str], texts: Mapping[str, str]) -> float:
        """How alike the call's free text is to a recorded call's (``digests``/``texts``): the lowest score over the
        free-text arguments either has (1.0 when there are none); an argument without text on a side scores by
        equality of its digests."""
        scores = [1.0]
        for name in {n for n in (*call.digests, *digests) if self.is_free(n)}:
            if name in call.texts and name in texts:
                scores.append(text_similarity(call.texts[name], texts[name]))
            else:
                scores.append(1.0 if call.digests.get(name) == digests.get(name) else 0.0)
        return min(scores)


def infer_rule(recorded: Iterable[tuple[Mapping[str, str], Mapping[str, str] | None]]) -> MatchRule:
    """The rule for one resource and method from production's recorded calls of it (``(digests, texts)`` each): an
    argument is free text when at least half of the calls that pass it pass natural language
    (:func:`is_free_text`) — a model that sometimes writes a short reason keeps it free text, an id that once
    reads like a sentence stays identifying."""
    passed: dict[str, int] = {}
    prose: dict[str, int] = {}
    for digests, texts in recorded:
        for name in digests:
            passed[name] = passed.get(name, 0) + 1
            if is_free_text((texts or {}).get(name, "")):
                prose[name] = prose.get(name, 0) + 1
    free = frozenset(name for name, n in prose.items() if 2 * n >= passed[name])
    return MatchRule(free_text=free, source="inferred") if free else MatchRule()
