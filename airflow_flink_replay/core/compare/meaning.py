"""Text that changes meaning: which words change between paraphrases, and which only in the candidate.

Similarity cannot see a flipped decision inside a sentence: "The refund is approved" -> "The refund is not
approved" is closer to the original than any paraphrase the A/A writes, so it counts as noise. Next to
similarity, this rule looks at *what* changes. For each aligned pair whose text differs (A vs A' for the noise,
A vs B for the candidate) it tokenises both texts and takes the words one has and the other has not (the
multiset difference of their tokens: words a paraphrase only moves cancel out), and keeps the changes of four
meaning-bearing classes:

* **negation**: the number of negations (``not``, ``no``, ``never``, ``none``, ``without``, ``cannot``, any
  ``n't``, and a few in German, French and Spanish) went up (``negation+``) or down (``negation-``); "is not" for
  "isn't" or "no" for "not" is no change;
* **decision**: a decision word was substituted, added or dropped (``decision approv -> declin``): a built-in
  list (approve, reject, deny, accept, refund, cancel, decline, yes, true/false, pass/fail, positive/negative,
  high/low, ...), the values of the categorical fields of the same outputs (a field with a few one-word values,
  such as ``$.decision``), and ``text_meaning_words``; words are compared by a crude stem, so "approve" and
  "approved" are one word, and "unapproved" another;
* **number**: a number was changed, added or dropped, compared by value (``40.00`` and ``40`` are one number);
* **entity**: a name was changed: a capitalised word not at the start of a sentence (a cheap heuristic, no
  language model) whose lower-case form the other text does not have anywhere.

:class:`MeaningTally` counts, per text field and change (its *signature*), the outputs with it between the
baselines and in the candidate, with the changed words and a few examples; :func:`judge_meaning` compares the
two counts with a one-sided Fisher exact test on the window's size, so a change the A/A never makes is
significant from a handful of outputs, and one the A/A makes as often (a paraphrase that rounds an amount) is
noise. Only pairs whose text differs are tokenised.

Optionally a **judge** (:class:`TextJudge`, e.g. a chat or embedding model behind a configured connection) is
asked "same meaning?" about a sample of the differing pairs of both the A/A and the candidate: its "different"
rate on the A/A is the noise. The sample is the pairs with the smallest stable hash of (key, index, field), so
both sides are sampled at one inclusion rate and the partitions of a spilled comparison merge exactly. Only the
interface lives here (no Airflow): the configured class is imported by its dotted path and given the
connection's name.
"""

from __future__ import annotations

import bisect
import heapq
import importlib
import itertools
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from airflow_flink_replay.core.compare.alignment import Run
from airflow_flink_replay.core.compare.config import CompareConfig
from airflow_flink_replay.core.compare.meaning_findings import MeaningExample, MeaningKind, MeaningStat
from airflow_flink_replay.core.compare.result import Reason
from airflow_flink_replay.core.compare.stats import binomial_greater, fisher_greater, weighted
from airflow_flink_replay.exceptions import CompareInputError

# ------------------------------------------------------------------------------------------- the words
NEGATIONS = frozenset(
    {
        *("not", "no", "never", "none", "nothing", "nobody", "nowhere", "neither", "nor", "without", "cannot"),
        *("nicht", "kein", "keine", "keinen", "keinem", "keiner", "keines", "nie", "niemals", "ohne"),
        *("pas", "jamais", "aucun", "aucune", "sans"),
        *("nunca", "ningún", "ninguno", "ninguna", "sin", "jamás", "tampoco"),
    }
)
#: The built-in decision words, common to most agents ("no" is a negation, counted as such).
DECISION_WORDS = (
    *("approve", "approved", "approval", "reject", "rejected", "rejection", "deny", "denied", "denial"),
    *("accept", "accepted", "refund", "refunded", "cancel", "cancelled", "canceled", "decline", "declined"),
    *("grant", "granted", "refuse", "refused", "allow", "allowed", "block", "blocked", "confirm", "confirmed"),
    *("escalate", "escalated", "yes", "true", "false", "pass", "passed", "fail", "failed", "positive"),
    *("negative", "high", "low", "eligible", "valid", "success", "successful", "correct", "safe", "urgent"),
)
#: Prefixes that turn a decision word into its opposite (both count as decision words, each its own).
_OPPOSITE_PREFIXES = ("un", "in", "dis", "non")

#: Stripped from both ends of a whitespace-separated word: punctuation, quotes, brackets, currency and percent
#: signs (``"$40.00),"`` is the number ``40.00``; ``isn't`` keeps its apostrophe, ``-5`` its sign).
_STRIP = ".,;:!?()[]{}<>\"'\u201c\u201d\u2018\u2019«»…*\u2013\u2014$€£¥%+#"
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")
_DECIMAL_COMMA = re.compile(r"\d+,\d{1,2}")
_DIGITS = re.compile(r"\d+")
#: Characters skipped before a word to tell whether it starts a sentence.
_OPENERS = "\"'\u201c\u201d\u2018\u2019«»([{*-•\u2013\u2014"
_SENTENCE_END = ".!?…"


def stem(word: str) -> str:
    """A crude stem, the same for a word's inflections (approve, approved, approves, approving -> ``approv``;
    cancel, cancelled -> ``cancel``; deny, denied -> ``deny``): only to compare decision words."""
    w = word.lower()
    if len(w) > 4 and w.endswith("ied"):
        return w[:-3] + "y"
    for suffix in ("ing", "ed", "es", "al", "s", "e"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and not (suffix == "s" and w.endswith("ss")):
            w = w[: -len(suffix)]
            break
    if len(w) >= 4 and w[-1] == w[-2] and w[-1] not in "aeiosu":
        w = w[:-1]
    return w


BUILTIN_STEMS = frozenset(stem(w) for w in DECISION_WORDS)


def _number(token: str) -> str:
    """A number's value as text: ``40.00`` and ``40`` give ``40``, ``1,000`` gives ``1000``, ``3,5`` gives ``3.5``."""
    text = token.replace(",", ".") if _DECIMAL_COMMA.fullmatch(token) else token.replace(",", "")
    try:
        return format(Decimal(text).normalize(), "f")
    except InvalidOperation:  # a version, a date: 1.2.3
        return token


@lru_cache(maxsize=1 << 16)
def _classify(token: str) -> tuple[str, str]:
    """(class, normal form) of a token: ``("number", "40")``, ``("negation", "not")``, ``("word", stem)``. A token
    that starts with a digit but is no plain number (a date ``2026-03-05``, a time ``12:30``, ``3rd``) is a number
    too, compared as written."""
    low = token.lower()
    if token[0].isdigit() or (token[0] == "-" and token[1:2].isdigit()):
        return "number", _number(token) if _NUMBER.fullmatch(token) else low
    if low in NEGATIONS:
        return "negation", low
    if low.endswith(("n't", "n\u2019t")):
        return "negation", "n't"
    return "word", stem(low)


@lru_cache(maxsize=64)
def decision_stems(vocabulary: frozenset[str]) -> frozenset[str]:
    """The decision words' stems with their opposites (``unapprov``, ``invalid``, ``disallow``, ``noncompliant``)."""
    return vocabulary | {p + s for s in vocabulary for p in _OPPOSITE_PREFIXES}


def _quoted(words: Iterable[str], most: int = 2) -> str:
    return ", ".join(f"'{w[:40]}'" for w in itertools.islice(dict.fromkeys(words), most))


def _evidence(removed: list[str], added: list[str]) -> str:
    """``'3' -> '30'``, ``+'30'`` (added only) or ``-'3'`` (dropped only)."""
    if removed and added:
        return f"{_quoted(removed)} -> {_quoted(added)}"
    return f"+{_quoted(added)}" if added else f"-{_quoted(removed)}"


def _starts_sentence(text: str, start: int) -> bool:
    j = start - 1
    while j >= 0 and (text[j] in _OPENERS or text[j].isspace()):
        if text[j] == "\n":
            return True
        j -= 1
    return j < 0 or text[j] in _SENTENCE_END


def tokens(text: str) -> list[str]:
    """The words of a text, split at whitespace, punctuation stripped from their ends (a regular expression over
    the text took four times as long: this runs for every pair of differing texts)."""
    return [t for w in text.split() if (t := w.strip(_STRIP))]


@lru_cache(maxsize=1 << 12)
def _word_at(word: str) -> re.Pattern[str]:
    """``word`` as a whole word (compiled once: the same names come back in every output)."""
    return re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")


def _names(text: str, words: set[str]) -> list[str]:
    """The ``words`` (capitalised tokens) that occur in ``text`` somewhere else than at a sentence's start."""
    found = []
    for word in sorted(words):
        for m in _word_at(word).finditer(text):
            if not _starts_sentence(text, m.start()):
                found.append(word)
                break
    return found


class Reference:
    """The numbers and words of every value of the baseline's output (built on first use). A number or name the
    other text adds that the baseline's output already holds somewhere (the customer's own phone number echoed
    back, in any format; the amount of ``$.amount``) adds no new fact: it is no change of meaning."""

    def __init__(self, flat: dict[str, Any]) -> None:
        self._flat = flat
        self._known: tuple[set[str], set[str]] | None = None

    def _build(self) -> tuple[set[str], set[str]]:
        numbers: set[str] = set()
        words: set[str] = set()
        for v in self._flat.values():
            if type(v) is int or type(v) is float:
                numbers.add(_number(str(v)))
            elif type(v) is str:
                found = tokens(v)
                words.update(t.lower() for t in found)
                numbers.update(_classify(t)[1] for t in found if t[0].isdigit())
                digits = "".join(_DIGITS.findall(v))
                if len(digits) >= 5:  # a phone or account number written with spaces or dashes
                    numbers.add(digits)
        return numbers, words

    def has_number(self, norm: str) -> bool:
        if self._known is None:
            self._known = self._build()
        return norm in self._known[0]

    def has_word(self, word: str) -> bool:
        if self._known is None:
            self._known = self._build()
        return word.lower() in self._known[1]


#: Per class, the (normal form, token) pairs that one text has beyond the other.
_ByClass = dict[str, list[tuple[str, str]]]


class _Classes(dict[str, tuple[str, str] | None]):
    """token -> (class, normal form) for the tokens the rule looks at — negations, numbers, decision words
    (``("decision", stem)``) and capitalised words (``("word", stem)``, maybe names) — None for any other word.
    Remembered (up to :data:`MAX_CLASSES` tokens): most words of a language come again and again."""

    def __init__(self, decisions: frozenset[str]) -> None:
        super().__init__()
        self.decisions = decisions

    def __missing__(self, token: str) -> tuple[str, str] | None:
        cls, norm = _classify(token)
        value: tuple[str, str] | None = (cls, norm)
        if cls == "word":
            if norm in self.decisions:
                value = ("decision", norm)
            elif len(token) < 2 or not token[0].isupper():
                value = None
        if len(self) < MAX_CLASSES:
            self[token] = value
        return value


MAX_CLASSES = 1 << 17


@lru_cache(maxsize=8)
def _classes(vocabulary: frozenset[str]) -> _Classes:
    return _Classes(decision_stems(vocabulary))


def _changed(ca: Counter[str], cb: Counter[str], classes: _Classes) -> tuple[_ByClass, _ByClass]:
    """The tokens whose count differs, by class, as often as ``a`` has them more (first) or ``b`` has them more
    (second); of the other words only the capitalised ones (names) are kept. The changed tokens come from the
    symmetric difference of the two counts' items, a set operation: a paraphrase costs little beyond counting."""
    lost: _ByClass = {}
    won: _ByClass = {}
    seen = [t for t, _ in ca.items() ^ cb.items() if classes[t] is not None]
    for token in sorted(set(seen)):
        cls, norm = classes[token]  # type: ignore[misc]
        delta = cb.get(token, 0) - ca.get(token, 0)
        (won if delta > 0 else lost).setdefault(cls, []).extend([(norm, token)] * abs(delta))
    return lost, won


def pair_changes(a: str, b: str, vocabulary: frozenset[str], known: Reference | None = None) -> dict[str, str]:
    """The meaning-bearing changes from text ``a`` to text ``b``: ``{signature: changed words}``, e.g.
    ``{"negation+": "'not'", "number": "'3' -> '30'"}`` (see the module's docstring); empty for a paraphrase.
    ``known``: the baseline's whole output, whose numbers and names ``b`` may add without changing a fact."""
    return _with_known(_raw_changes(a, Counter(tokens(a)), b, Counter(tokens(b)), _classes(vocabulary)), known)


#: The changes of a pair of texts before the baseline's output is consulted: ``("fixed", signature, evidence)``
#: for a negation or a decision, ``("number", lost, won, removed, added)`` (the numbers lost and won, with the
#: (normal form, token) pairs of each side) and ``("entity", gone, new)`` (the names each side has alone).
_Raw = tuple[tuple[Any, ...], ...]


def _raw_changes(a: str, ca: Counter[str], b: str, cb: Counter[str], classes: _Classes) -> _Raw:
    """:func:`pair_changes` of two texts with their words counted, as far as it depends on the texts alone (so it
    can be remembered per pair of texts: :func:`_with_known` finishes it for one baseline output)."""
    if ca == cb:  # the same words: only their order, spacing or punctuation changed
        return ()
    sides = _changed(ca, cb, classes)
    if not sides[0] and not sides[1]:
        return ()
    out: list[tuple[Any, ...]] = []
    lost_neg, won_neg = sides[0].get("negation", []), sides[1].get("negation", [])
    if len(lost_neg) != len(won_neg):
        more = len(won_neg) > len(lost_neg)
        said = _quoted((t.lower() for _, t in (won_neg if more else lost_neg)), 3)
        out.append(("fixed", "negation+" if more else "negation-", said))
    for cls in ("decision", "number"):
        pairs = (sides[0].get(cls, []), sides[1].get(cls, []))
        if not pairs[0] and not pairs[1]:
            continue
        gone, new = Counter(n for n, _ in pairs[0]), Counter(n for n, _ in pairs[1])
        lost, won = gone - new, new - gone
        if cls == "number":
            out.append(("number", lost, won, pairs[0], pairs[1]))
        elif lost or won:
            removed_words = [t.lower() for n, t in pairs[0] if n in lost]
            added_words = [t.lower() for n, t in pairs[1] if n in won]
            signature = f"decision {','.join(sorted(lost))} -> {','.join(sorted(won))}"
            out.append(("fixed", signature, _evidence(removed_words, added_words)))
    names = _entity_names(a, b, (sides[0].get("word", []), sides[1].get("word", [])), ca, cb)
    if names is not None:
        out.append(("entity", *names))
    return tuple(out)


def _with_known(raw: _Raw, known: Reference | None) -> dict[str, str]:
    """The changes of :func:`_raw_changes` but the numbers and names ``b`` adds that the baseline's output holds
    (``known``)."""
    out: dict[str, str] = {}
    for item in raw:
        if item[0] == "fixed":
            out[item[1]] = item[2]
        elif item[0] == "number":
            _, lost, won, removed, added = item
            if won and known is not None:
                won = Counter({n: c for n, c in won.items() if not known.has_number(n)})
            if lost or won:
                out["number"] = _evidence([t for n, t in removed if n in lost], [t for n, t in added if n in won])
        else:
            gone, new = item[1], item[2]
            if new and known is not None:
                new = [t for t in new if not known.has_word(t)]
            if gone or new:
                out["entity"] = _evidence(gone, new)
    return out


def _entity_names(
    a: str,
    b: str,
    words: tuple[list[tuple[str, str]], list[tuple[str, str]]],
    ca: Counter[str],
    cb: Counter[str],
) -> tuple[list[str], list[str]] | None:
    """The names (capitalised words of ``words``) one text has and the other has nowhere, in any case, said in
    the middle of a sentence: (``a``'s, ``b``'s); None when there are none (a name ``b`` adds that the baseline's
    output holds is dropped later, by :func:`_with_known`)."""
    if not words[0] and not words[1]:
        return None
    gone = _names(a, {t for _, t in words[0] if not _has(cb, t)}) if words[0] else []
    new = _names(b, {t for _, t in words[1] if not _has(ca, t)}) if words[1] else []
    return (gone, new) if gone or new else None


def _has(counts: Counter[str], word: str) -> bool:
    """The text of ``counts`` has ``word`` in lower case, capitalised or in capitals."""
    low = word.lower()
    return low in counts or low.capitalize() in counts or word.upper() in counts


def excerpt(a: str, b: str, context: int = 60, most: int = 300) -> tuple[str, str]:
    """Both texts around where they differ: the differing stretch (at most ``most`` characters) with ``context``
    characters either side, ``…`` where cut."""
    lo = 0
    limit = min(len(a), len(b))
    while lo < limit and a[lo] == b[lo]:
        lo += 1
    tail = 0
    while tail < limit - lo and a[-1 - tail] == b[-1 - tail]:
        tail += 1

    def cut(s: str) -> str:
        start = max(0, lo - context)
        end = min(len(s), len(s) - tail + context, start + most + 2 * context)
        return ("…" if start else "") + s[start:end] + ("…" if end < len(s) else "")

    return cut(a), cut(b)


# -------------------------------------------------------------------------------------------- the judge
@runtime_checkable
class TextJudge(Protocol):
    """Says whether two texts mean the same: True / False, or a score in [0, 1] (1 = same meaning; below
    ``text_judge_threshold`` counts as different). Implemented outside the comparison core, e.g. by a chat model
    asked "same meaning?" or by the cosine similarity of an embedding model, reached through a connection."""

    def same_meaning(self, a: str, b: str) -> bool | float: ...


class _FunctionJudge:
    """A plain function ``(a, b) -> bool | float`` used as a judge."""

    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def same_meaning(self, a: str, b: str) -> bool | float:
        return self._fn(a, b)  # type: ignore[no-any-return]


def _judge_target(spec: str) -> Any:
    """What ``spec`` (``package.module:Name`` or ``package.module.Name``) names; raises :class:`CompareInputError`."""
    module_name, _, name = spec.partition(":") if ":" in spec else spec.rpartition(".")
    try:
        if not module_name or not name:
            raise ValueError("expected 'package.module:Name'")
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise CompareInputError(
            "text_judge",
            f"cannot load the text judge {spec!r}: {err}. Fix: give the dotted path ('package.module:ClassName') of "
            "a class with a method same_meaning(a, b) -> bool | float, importable where the comparison runs",
        ) from None


def load_judge(spec: str, connection: str | None = None) -> TextJudge:
    """The judge ``spec`` names: a class (instantiated with ``connection=`` when a connection is configured,
    else without arguments), an object with ``same_meaning``, or a function ``(a, b) -> bool | float``."""
    target = _judge_target(spec)
    if isinstance(target, type):
        judge = target(connection=connection) if connection else target()
    elif callable(target) and not hasattr(target, "same_meaning"):
        judge = _FunctionJudge(target)
    else:
        judge = target
    if not callable(getattr(judge, "same_meaning", None)):
        raise CompareInputError(
            "text_judge", f"{spec!r} has no method same_meaning(a, b). Fix: implement the TextJudge protocol"
        )
    return judge  # type: ignore[no-any-return]


def _stable_hash(key: str, index: int, path: str) -> float:
    """A uniform number in [0, 1) of an output's field, the same in every process (Python's hash is salted)."""
    return zlib.crc32(f"{key}\x1f{index}\x1f{path}".encode("utf-8", "surrogatepass")) / 2**32


# -------------------------------------------------------------------------------------------- the tally
#: (path, signature) -> outputs
Counts = Counter[tuple[str, str]]
#: The most distinct changed words kept per (field, signature), and distinct signatures per run pair.
MAX_WORDS = 200
MAX_SIGNATURES = 4096
#: A sampled pair for the judge: (-hash, key, index, baseline text, other text) in a max-heap of the smallest hashes.
Sampled = tuple[float, str, int, str, str]


#: Pairs of texts whose changes a tally remembers, and texts whose words are remembered counted (each cleared
#: when full): a baseline text is read with A' and with B, and agents repeat their texts.
MAX_PAIRS = 1 << 14
MAX_COUNTED = 1 << 12
_COUNTED: dict[str, Counter[str]] = {}


def _words_of(text: str) -> Counter[str]:
    """The words of ``text`` counted (remembered: never change the counter returned)."""
    counted = _COUNTED.get(text)
    if counted is None:
        if len(_COUNTED) >= MAX_COUNTED:
            _COUNTED.clear()
        counted = _COUNTED[text] = Counter(tokens(text))
    return counted


def _prose(s: str) -> bool:
    """Several words: a text the rule reads (a single token, an id or a label, is the exact comparator's)."""
    return " " in s or "\n" in s


class Words:
    """The changed words of one (field, change) with their counts: at most :data:`MAX_WORDS` distinct, those with
    the smallest stable hash, so that the same words are kept whatever order the outputs (or partitions) come in,
    each with its exact count (a word evicted once has enough smaller ones never to be among those kept)."""

    __slots__ = ("_heap", "counts")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []

    def add(self, word: str, n: int = 1) -> None:
        counts = self.counts
        if word in counts:
            counts[word] += n
            return
        item = (-zlib.crc32(word.encode("utf-8", "surrogatepass")), word)
        if len(counts) < MAX_WORDS:
            heapq.heappush(self._heap, item)
        elif item > self._heap[0]:
            del counts[heapq.heapreplace(self._heap, item)[1]]
        else:
            return
        counts[word] = n

    def merge(self, other: Words) -> None:
        for word, n in other.counts.items():
            self.add(word, n)

    def most_common(self) -> dict[str, int]:
        return dict(sorted(self.counts.items(), key=lambda wn: (-wn[1], wn[0])))


class MeaningTally:
    """Per text field and signature: outputs with that change between the baselines and in the candidate, their
    changed words, the first examples by key; and the judge's samples. One per partition of a spilled
    comparison, merged (:meth:`merge`)."""

    #: how much one A/A count weighs in the exact tests (below 1 when several pairs of baseline runs are pooled)
    noise_weight: float = 1.0

    def __init__(self, config: CompareConfig, vocabulary: frozenset[str]) -> None:
        self.config = config
        self.vocabulary = vocabulary
        self.rules = config.text_meaning
        self.sample_size = config.text_judge_sample if config.text_judge else 0
        self.max_examples = max(1, min(config.max_examples, 3))
        #: [noise, candidate]
        self.counts: list[Counts] = [Counter(), Counter()]
        self.words: list[dict[tuple[str, str], Words]] = [{}, {}]
        self.examples: list[dict[tuple[str, str], list[MeaningExample]]] = [{}, {}]
        self.samples: list[dict[str, list[Sampled]]] = [{}, {}]
        self._paths: dict[str, bool] = {}
        self._reference: Reference | None = None
        #: (baseline text, other text) -> its changes before the baseline's output is consulted (bounded)
        self._memo: dict[tuple[str, str], _Raw | dict[str, str]] = {}
        self._classes = _classes(vocabulary)

    def add(
        self,
        key: str,
        index: int,
        fa: dict[str, Any],
        fx: dict[str, Any],
        candidate: bool,
        paths: Iterable[str] | None = None,
    ) -> None:
        """Look at the texts of ``fx`` (A' or B's output) that differ from ``fa`` (A's, for the same input);
        ``paths``: where ``fx`` holds a string unlike ``fa``'s when known (the differ's), else all of fx's paths."""
        if paths is None:
            if fa is fx or fa == fx:
                return
            paths = fx
        side = int(candidate)
        for p in paths:
            x = fx.get(p)
            if type(x) is not str:
                continue
            a = fa.get(p)
            if type(a) is not str or a == x or not (_prose(a) or _prose(x)):
                continue
            read = self._paths.get(p)
            if read is None:
                read = self._paths[p] = self._read(p)
            if not read:
                continue
            if self.rules:
                raw = self._raw(a, x)
                if raw:
                    found = raw if isinstance(raw, dict) else _with_known(raw, self._reference_of(fa))
                    for signature, words in found.items():
                        self._found(side, p, signature, words, key, index, a, x)
            if self.sample_size:
                self._sample(side, p, (-_stable_hash(key, index, p), key, index, a, x))

    def _raw(self, a: str, x: str) -> _Raw | dict[str, str]:
        """:func:`_raw_changes` of two texts, remembered for the last :data:`MAX_PAIRS` pairs (agents repeat their
        texts: the same baseline text and its paraphrases come again and again); already the changes (a dict, not
        to be changed) when no number or name was added, so the baseline's output has nothing to say."""
        memo = self._memo
        raw = memo.get((a, x))
        if raw is None:
            raw = _raw_changes(a, _words_of(a), x, _words_of(x), self._classes)
            if raw and all(item[0] == "fixed" or not item[2] for item in raw):
                raw = _with_known(raw, None)
            if len(memo) >= MAX_PAIRS:
                memo.clear()
            memo[a, x] = raw
        return raw

    def _read(self, path: str) -> bool:
        """Whether the rule reads the path's texts: compared as text (a rule) or by type (the auto comparator)."""
        rule = self.config.rule_for(path)
        return rule is None or rule.comparator in ("auto", "text")

    def _reference_of(self, fa: dict[str, Any]) -> Reference:
        """The baseline output's values (one per baseline output: its A' and B pairs come one after the other)."""
        if self._reference is None or self._reference._flat is not fa:
            self._reference = Reference(fa)
        return self._reference

    def _found(self, side: int, path: str, signature: str, words: str, key: str, index: int, a: str, x: str) -> None:
        pk = (path, signature)
        counts = self.counts[side]
        if pk not in counts and len(counts) >= MAX_SIGNATURES:
            pk = (path, signature.split(" ", 1)[0] + " (other)")
        counts[pk] += 1
        said = self.words[side].get(pk)
        if said is None:
            said = self.words[side][pk] = Words()
        said.add(words)
        kept = self.examples[side].setdefault(pk, [])
        if len(kept) < self.max_examples or (key, index) < (kept[-1].key, kept[-1].index):
            before, after = excerpt(a, x)
            example = MeaningExample(key=key, index=index, baseline=before, other=after, change=words)
            bisect.insort(kept, example, key=_order)
            del kept[self.max_examples :]

    def _sample(self, side: int, path: str, item: Sampled) -> None:
        heap = self.samples[side].setdefault(path, [])
        if len(heap) < self.sample_size:
            heapq.heappush(heap, item)
        elif item > heap[0]:
            heapq.heapreplace(heap, item)

    def merge(self, other: MeaningTally) -> None:
        """Add the tally of other outputs (another partition's)."""
        for side in (0, 1):
            for pk, n in other.counts[side].items():
                self.counts[side][pk] += n
            for pk, words in other.words[side].items():
                said = self.words[side].get(pk)
                if said is None:
                    said = self.words[side][pk] = Words()
                said.merge(words)
            for pk, examples in other.examples[side].items():
                kept = self.examples[side].setdefault(pk, [])
                kept += examples
                kept.sort(key=_order)
                del kept[self.max_examples :]
            for path, heap in other.samples[side].items():
                for item in heap:
                    self._sample(side, path, item)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_paths={}, _reference=None, _memo={}, _classes=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._classes = _classes(self.vocabulary)


def _order(example: MeaningExample) -> tuple[str, int]:
    return example.key, example.index


def categorical_words(outputs: Iterable[dict[str, Any]], most_values: int = 12) -> frozenset[str]:
    """The stems of the values of categorical fields: string fields whose values are single words of three letters
    or more, with at most ``most_values`` distinct ones, each seen twice on average (``$.decision``: approve,
    reject)."""
    values: dict[str, Counter[str]] = {}
    seen = 0
    for flat in outputs:
        seen += 1
        for p, v in flat.items():
            if type(v) is str and 3 <= len(v) <= 32 and v.isalpha():
                values.setdefault(p, Counter())[v.lower()] += 1
    out: set[str] = set()
    for counts in values.values():
        total = sum(counts.values())
        if len(counts) <= most_values and total >= max(10, 2 * len(counts)) and total >= seen // 2:
            out.update(stem(v) for v in counts)
    return frozenset(out)


def _first_outputs(run: Run, n: int = 200) -> Iterator[dict[str, Any]]:
    if run.samples:
        return iter(run.samples[:n])
    return itertools.islice((e[0] for entries in run.by_key.values() for e in entries), n)


def meaning_tally(config: CompareConfig, baseline: Run) -> MeaningTally | None:
    """A new tally, its decision words from the built-in list, ``text_meaning_words`` and the categorical fields of
    the baseline's first outputs; None when the rule and the judge are off. A judge that cannot be imported is
    reported now, before the comparison."""
    if not config.text_meaning and not config.text_judge:
        return None
    if config.text_judge:
        _judge_target(config.text_judge)
    extra = {stem(w) for w in config.text_meaning_words}
    return MeaningTally(config, BUILTIN_STEMS | categorical_words(_first_outputs(baseline)) | extra)


# ------------------------------------------------------------------------------------------ the decision
_KIND = {"negation+": "negation", "negation-": "negation", "number": "number", "entity": "entity"}


def _kind(signature: str) -> MeaningKind:
    return _KIND.get(signature, "decision")  # type: ignore[return-value]


def _top(words: Words | None, most: int = 20) -> dict[str, int]:
    return dict(itertools.islice(words.most_common().items(), most)) if words is not None else {}


def _change(signature: str, words: dict[str, int]) -> str:
    """The change in words, with the candidate's (or the A/A's) most frequent changed words."""
    said = ", ".join(itertools.islice(words, 3))
    if signature == "negation+":
        return f"insert a negation ({said})"
    if signature == "negation-":
        return f"drop a negation ({said})"
    if signature == "number":
        return f"change a number ({said})"
    if signature == "entity":
        return f"change a name ({said})"
    lost, _, won = signature.removeprefix("decision ").partition(" -> ")
    if lost and won:
        return f"substitute {said}"
    return f"add the decision word {said.lstrip('+')}" if won else f"drop the decision word {said.lstrip('-')}"


def _beyond(st: MeaningStat, config: CompareConfig) -> bool:
    """The candidate's rate exceeds the A/A's by more than ``rel_threshold`` of it and by an absolute margin that
    grows with the A/A's own rate of the change: ``text_meaning_abs_threshold`` for a change the A/A (almost) never
    makes, the A/A's rate itself above that, at most the fields' ``abs_threshold``. A change the paraphrases make
    too is noise as a field's changes are (two samples of 4% differ by 2 points one time in twenty), one they never
    make is significant from a handful of outputs."""
    if st.noise_outputs is None or not st.noise_n or not st.candidate_n:
        return False
    p1, p0 = st.candidate_outputs / st.candidate_n, st.noise_outputs / st.noise_n
    margin = min(
        max(config.text_meaning_abs_threshold, p0), max(config.abs_threshold, config.text_meaning_abs_threshold)
    )
    return p1 - p0 > margin and (p0 == 0 or p1 - p0 > config.rel_threshold * p0)


def judge_meaning(
    tally: MeaningTally | None, n_noise: int | None, n_candidate: int, config: CompareConfig
) -> tuple[list[MeaningStat], list[Reason]]:
    """Per text field and change seen anywhere, its stat (failures first); and the reasons: one ``TEXT_MEANING``
    FAIL reason per field with a change beyond the noise, ``TEXT_JUDGE`` when the judge's "different" rate is,
    and one info reason for the changes the A/A makes as often.

    With baseline-2: FAIL when the candidate's rate exceeds the A/A's by the margins (:func:`_beyond`) and the
    one-sided exact test gives ``p < alpha / k`` (Bonferroni over the ``k`` changes beyond the margins: a change
    the A/A never makes is significant from a handful of outputs, and many rare wordings at once are not).
    Without baseline-2 nothing tells a paraphrase from a change of meaning (an LLM's rewording adds a "no" or a
    name as well): the changes are listed (``uncalibrated``, an info reason) and decide nothing."""
    if tally is None or n_candidate <= 0:
        return [], []
    judged, errors = _judge_stats(tally, n_noise, n_candidate, config)
    stats = _rule_stats(tally, n_noise, n_candidate) + judged
    beyond = {id(st) for st in stats if _beyond(st, config)}
    for st in stats:
        if n_noise is None:
            st.status = "uncalibrated" if st.candidate_outputs else "ok"
            continue
        st.alpha = config.alpha / max(1, len(beyond))
        failed = id(st) in beyond and st.p_value is not None and st.p_value < st.alpha
        st.status = "fail" if failed else ("within_noise" if st.candidate_outputs else "ok")
    stats.sort(key=lambda st: (st.status != "fail", st.field, -st.candidate_outputs, st.signature))
    return stats, _reasons(stats, config) + errors


def _rule_stats(tally: MeaningTally, n0: int | None, n1: int) -> list[MeaningStat]:
    noise, cand = tally.counts
    stats = []
    for path, signature in sorted(noise.keys() | cand.keys()):
        pk = (path, signature)
        x1 = cand[pk]
        x0 = noise[pk] if n0 is not None else None
        words, noise_words = _top(tally.words[1].get(pk)), _top(tally.words[0].get(pk))
        st = MeaningStat(
            field=path,
            kind=_kind(signature),
            change=_change(signature, words or noise_words),
            signature=signature,
            candidate_outputs=x1,
            candidate_n=n1,
            noise_outputs=x0,
            noise_n=n0,
            words=words,
            noise_words=noise_words if n0 is not None else {},
            examples=tally.examples[1].get(pk, []),
            noise_examples=tally.examples[0].get(pk, []) if n0 is not None else [],
        )
        if x0 is not None and n0:
            st.p_value = fisher_greater(x1, n1, *weighted(x0, n0, tally.noise_weight))
        stats.append(st)
    return stats


class _JudgeFailed(Exception):
    """The judge raised on a pair: the comparison goes on, INCONCLUSIVE for that field."""


def _judge_stats(
    tally: MeaningTally, n0: int | None, n1: int, config: CompareConfig
) -> tuple[list[MeaningStat], list[Reason]]:
    """Ask the judge about the sampled pairs of each field, the A/A's and the candidate's at one inclusion rate
    ``tau`` (the larger of the two sides' k-th smallest hash is cut to the smaller); the counts of "different" are
    compared by the exact binomial test of two counts over exposures ``tau * n0`` and ``tau * n1``. A field on
    which the judge fails gets an INCONCLUSIVE ``TEXT_JUDGE`` reason instead."""
    if not tally.sample_size or not config.text_judge:
        return [], []
    judge = load_judge(config.text_judge, config.text_judge_connection)
    stats, errors = [], []
    for path in sorted(tally.samples[0].keys() | tally.samples[1].keys()):
        heaps = [tally.samples[side].get(path, []) for side in (0, 1)]
        tau = min(-heap[0][0] if len(heap) >= tally.sample_size else 1.0 for heap in heaps)
        asked = [[item for item in sorted(heap, reverse=True) if -item[0] <= tau] for heap in heaps]
        different: list[list[Sampled]] = [[], []]
        try:
            for side in (0, 1) if n0 is not None else (1,):
                different[side] = [item for item in asked[side] if not _same(judge, item, config)]
        except _JudgeFailed as err:
            errors.append(Reason(code="TEXT_JUDGE", severity="inconclusive", message=f"{path}: {err}", fields=[path]))
            continue
        x0, x1 = len(different[0]), len(different[1])
        st = MeaningStat(
            field=path,
            kind="judge",
            change=f"different meaning (judge {config.text_judge})",
            signature="judge",
            candidate_outputs=x1,
            candidate_n=max(1, round(tau * n1)),
            noise_outputs=x0 if n0 is not None else None,
            noise_n=max(1, round(tau * n0)) if n0 is not None else None,
            words={"different meaning": x1} if x1 else {},
            asked=len(asked[1]),
            noise_asked=len(asked[0]) if n0 is not None else None,
            examples=[_example(item) for item in different[1][: tally.max_examples]],
            noise_examples=[_example(item) for item in different[0][: tally.max_examples]],
        )
        if n0:
            x0w, n0w = weighted(x0, n0, tally.noise_weight)
            st.p_value = binomial_greater(x1, x0w + x1, n1 / (n0w + n1))
        stats.append(st)
    return stats, errors


def _same(judge: TextJudge, item: Sampled, config: CompareConfig) -> bool:
    """The judge's answer about one pair (a score below ``text_judge_threshold`` is "different")."""
    try:
        answer = judge.same_meaning(item[3], item[4])
    except Exception as err:  # the judge is the user's code or a remote model
        raise _JudgeFailed(
            f"the text judge {config.text_judge!r} failed on key {item[1]} ({type(err).__name__}: {err}), so the "
            "meaning of this field was not judged. Fix: check the judge and its connection, or unset text_judge"
        ) from err
    if isinstance(answer, bool):
        return answer
    return float(answer) >= config.text_judge_threshold


def _example(item: Sampled) -> MeaningExample:
    before, after = excerpt(item[3], item[4])
    return MeaningExample(key=item[1], index=item[2], baseline=before, other=after, change="different meaning")


def _counts_msg(st: MeaningStat) -> str:
    """``40 of 1000 outputs (4.0%) insert a negation ('not'), which the A/A never does (0 of 1000)``."""
    unit = "sampled outputs" if st.kind == "judge" else "outputs"
    said = f"{st.candidate_outputs} of {st.candidate_n} {unit} ({st.candidate_outputs / st.candidate_n:.1%}) "
    said += (
        f"differ in meaning by the judge {st.change.removeprefix('different meaning (judge ')[:-1]}"
        if st.kind == "judge"
        else st.change
    )
    if st.noise_outputs is None or not st.noise_n:
        return said
    if st.noise_outputs == 0:
        said += f", which the A/A never does (0 of {st.noise_n})"
    else:
        said += f", which the A/A does in {st.noise_outputs} of {st.noise_n} ({st.noise_outputs / st.noise_n:.1%})"
    if st.p_value is not None and st.alpha is not None:
        test = "binomial" if st.kind == "judge" else "Fisher"
        said += f"; one-sided {test} exact p = {st.p_value:.2g} {'<' if st.p_value < st.alpha else '≥'} {st.alpha:.2g}"
        if st.status != "fail" and st.p_value < st.alpha:
            said += " but within the margins"
    return said


def _example_msg(examples: list[MeaningExample]) -> str:
    if not examples:
        return ""
    ex = examples[0]
    return f"; e.g. key {ex.key}: “{ex.baseline[:200]}” -> “{ex.other[:200]}”"


def describe_meaning(st: MeaningStat) -> str:
    """One change of one field in words, with its first example: a JUnit test case's message."""
    return f"{st.status.replace('_', ' ')}: {_counts_msg(st)}{_example_msg(st.examples)}"


def _reasons(stats: list[MeaningStat], config: CompareConfig) -> list[Reason]:
    reasons = []
    for code, judged in (("TEXT_MEANING", False), ("TEXT_JUDGE", True)):
        failed = [st for st in stats if st.status == "fail" and (st.kind == "judge") == judged]
        for path in dict.fromkeys(st.field for st in failed):
            mine = [st for st in failed if st.field == path]
            message = f"{path}: " + "; and ".join(_counts_msg(st) + _example_msg(st.examples) for st in mine[:3])
            if len(mine) > 3:
                message += f"; and {len(mine) - 3} more changes"
            reasons.append(Reason(code=code, severity="fail", message=message, fields=[path]))
    for status, code, why in (
        ("within_noise", "TEXT_MEANING_WITHIN_NOISE", "not significantly more often than between the baselines"),
        (
            "uncalibrated",
            "TEXT_MEANING_UNCALIBRATED",
            "not judged: without baseline-2 a paraphrase cannot be told "
            "from a change of meaning; run the baseline twice (--baseline-2)",
        ),
    ):
        calm = [st for st in stats if st.status == status]
        if calm:
            message = "; ".join(f"{st.field}: {_counts_msg(st)}" for st in calm[:5])
            more = f"; and {len(calm) - 5} more" if len(calm) > 5 else ""
            fields = list(dict.fromkeys(st.field for st in calm))[: config.max_fields_listed]
            reasons.append(Reason(code=code, severity="info", message=f"{message}{more} — {why}", fields=fields))
    return reasons
