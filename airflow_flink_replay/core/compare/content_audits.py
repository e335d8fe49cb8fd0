"""Content audits of agent outputs: what a reviewer flags in a text even when it is rare.

A field's change rate answers "did the behaviour change beyond the noise"; it cannot see a reply that discloses
another customer's phone number in 0.5 % of outputs. These audits look at the *content* of each text field of
each aligned pair, baseline A against the other run X (baseline-2 A' for the noise, candidate B), and give a
finding when X's text shows something A's text for the same input does not:

* ``sensitive_data``: an e-mail address, a phone number (parsed and validated by ``phonenumbers``), an IBAN
  passing its mod-97 check or a card number passing the Luhn check (``python-stdnum``) that appears nowhere in
  A's output for the same key (any field: the customer's own number echoed back is no finding);
* ``word_list``: a listed word or phrase (``compare.audits.words``, whole words, any case) not in A's text;
* ``language``: another language than A's text (``pycld2``, Google's CLD2 with its model in the wheel; both
  texts need ``language_min_letters`` letters and a reliable identification);
* ``truncated``: X's text ends mid-sentence (no final punctuation, closing bracket or quote, emoji) where A's
  ends properly;
* ``empty``: X's text is empty or whitespace where A's is not.

Only string leaves the comparison treats as text are audited (the ``auto`` comparator's rule: whitespace or at
least ``text_min_length`` characters on either side, or a ``text`` comparator rule), and only where X's value
differs from A's: an unchanged text cannot show anything new. The pre-filters keep it cheap: numbers are parsed
only in texts with a run of seven digits, e-mail addresses looked for only after an ``@``, and a digit run that A's
output already holds is never parsed.

:class:`ContentTally` counts, per (audit, field), the outputs with a finding between the baselines and in the
candidate, with masked examples; :func:`judge_content` compares the two counts with a one-sided Fisher exact
test on the window's size (see docs/comparison.md, "Content audits").
"""

from __future__ import annotations

import bisect
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from airflow_flink_replay.core.compare.comparators import _is_text  # the auto comparator's text rule
from airflow_flink_replay.core.compare.config import CompareConfig, is_under
from airflow_flink_replay.core.compare.content_findings import AuditName, ContentAuditStat, ContentExample
from airflow_flink_replay.core.compare.content_rules import SENSITIVE_KINDS, ContentAudits
from airflow_flink_replay.core.compare.result import ComparisonResult, Reason
from airflow_flink_replay.core.compare.stats import fisher_greater, weighted

#: The audits in report order, with their reason codes and what a finding is.
AUDITS: tuple[AuditName, ...] = ("sensitive_data", "word_list", "language", "truncated", "empty")
REASON_CODES: dict[str, str] = {
    "sensitive_data": "CONTENT_SENSITIVE_DATA",
    "word_list": "CONTENT_WORD_LIST",
    "language": "CONTENT_LANGUAGE",
    "truncated": "CONTENT_TRUNCATED",
    "empty": "CONTENT_EMPTY",
}
#: Informs about audits whose candidate findings are as frequent as the baselines' own.
WITHIN_NOISE_CODE = "CONTENT_WITHIN_NOISE"
_FINDING = {
    "sensitive_data": "sensitive data the baseline's output for the same input does not hold",
    "word_list": "listed words the baseline's text for the same input does not have",
    "language": "another language than the baseline's text for the same input",
    "truncated": "text ending mid-sentence where the baseline's for the same input ends properly",
    "empty": "empty or whitespace-only text where the baseline's for the same input is not",
}
_KIND_NAMES = {"email": "e-mail address", "phone": "phone number", "iban": "IBAN", "card": "card number"}

# ------------------------------------------------------------------------------------------ sensitive data
#: Bounded parts (RFC 5321's lengths): a long text with an '@' is scanned in linear time.
_EMAIL = re.compile(r"[\w.%+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63}){0,8}\.[^\W\d_]{2,24}")
#: The pre-filter of numbers: seven digits, single separators allowed between them.
_SEVEN_DIGITS = re.compile(r"\d(?:[ \-./()]{0,2}\d){6}")
#: A run of digits as phone and card numbers are written (an optional leading '+' or '(').
_NUMBER_RUN = re.compile(r"(?<![\w+])(?:\+|\(\+?)?\d(?:[ \-./()]{0,2}\d)*(?!\w)")
_DIGIT_GROUP = re.compile(r"\d(?:[ \-./()]{0,2}\d)*")
_IBAN = re.compile(r"(?<!\w)[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![a-z0-9])")
_NOT_DIGIT = re.compile(r"\D+")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Hit:
    """One sensitive value in a text: its kind, span, normalised value (for the baseline check) and how many of
    its leading characters stay readable when masked (an IBAN's country, a phone number's country code)."""

    kind: str
    start: int
    end: int
    value: str
    keep_head: int = 0


@cache
def _libraries() -> tuple[Any, Any, Any]:
    """phonenumbers, stdnum.iban and stdnum.luhn, imported on first use (the comparison may never need them)."""
    import phonenumbers
    from stdnum import iban, luhn

    return phonenumbers, iban, luhn


def _ibans(text: str) -> Iterable[Hit]:
    _, iban, _ = _libraries()
    for m in _IBAN.finditer(text):
        raw = m.group()
        while len(raw.replace(" ", "")) >= 15:  # the regex may take a following code: drop trailing groups
            if iban.is_valid(raw):
                yield Hit("iban", m.start(), m.start() + len(raw), raw.replace(" ", "").upper(), keep_head=2)
                break
            cut = raw.rfind(" ")
            if cut < 0:
                break
            raw = raw[:cut]


def _phones(text: str, start: int, region: str | None) -> Iterable[Hit]:
    phonenumbers, _, _ = _libraries()
    leniency = phonenumbers.Leniency.VALID
    for m in phonenumbers.PhoneNumberMatcher(text, region, leniency=leniency):
        cc = str(m.number.country_code)
        head = len(cc) if m.raw_string.lstrip("( ").startswith("+") else 0
        yield Hit("phone", start + m.start, start + m.end, str(m.number.national_number), keep_head=head)


def find_sensitive(
    text: str,
    kinds: Iterable[str] = ("email", "phone", "iban", "card"),
    region: str | None = None,
    known: Callable[[str, str], bool] | None = None,
    first: bool = False,
) -> list[Hit]:
    """The sensitive values in ``text``, in order. With ``known(kind, value)``, the values it knows are left out
    (a digit run it knows is not even parsed: the cheap path of the audit); with ``first``, at most one of each
    kind (what counting needs: a text full of new numbers is not parsed number by number)."""
    kinds = set(kinds)
    hits: list[Hit] = []
    if "email" in kinds and "@" in text:
        for m in _EMAIL.finditer(text):
            if known is None or not known("email", m.group().lower()):
                hits.append(Hit("email", m.start(), m.end(), m.group().lower()))
                if first:
                    break
    if kinds & {"phone", "iban", "card"} and _SEVEN_DIGITS.search(text) is not None:
        ibans = list(_ibans(text)) if "iban" in kinds else []
        new = [h for h in ibans if known is None or not known(h.kind, h.value)]
        hits += new[:1] if first else new
        hits += _numbers(text, kinds, region, ibans, known, first)
    return sorted(hits, key=lambda h: h.start)


def _numbers(
    text: str,
    kinds: set[str],
    region: str | None,
    ibans: list[Hit],
    known: Callable[[str, str], bool] | None,
    first: bool,
) -> list[Hit]:
    """Card and phone numbers among the digit runs of ``text`` that no IBAN covers, but those ``known`` knows
    (with ``first``: at most one of each kind)."""
    _, _, luhn = _libraries()
    wanted = kinds & {"card", "phone"}
    out: list[Hit] = []
    for m in _NUMBER_RUN.finditer(text):
        if not wanted:
            break
        if any(h.start < m.end() and m.start() < h.end for h in ibans):
            continue
        digits = _NOT_DIGIT.sub("", m.group())
        if len(digits) < 7 or (known is not None and known("number", digits)):
            continue
        if "card" in wanted and 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn.is_valid(digits):
            found = [Hit("card", m.start(), m.end(), digits)]
        elif "phone" in wanted and len(digits) <= 17 and (region is not None or "+" in m.group()):
            found = [h for h in _phones(m.group(), m.start(), region) if known is None or not known("phone", h.value)]
        else:
            continue
        out += found[:1] if first else found
        if first and found:
            wanted.discard(found[0].kind)
    return out


def mask(hit: Hit, raw: str) -> str:
    """``raw`` (the text of ``hit``) masked: ``j***@m***.com``; a number's digits but its head (country) and its
    last two (phone) or four (IBAN, card) as ``*``, separators kept."""
    if hit.kind == "email":
        local, _, domain = raw.partition("@")
        labels = domain.split(".")
        return f"{local[:1]}***@{labels[0][:1]}***.{labels[-1]}"
    tail = 2 if hit.kind == "phone" else 4
    total = sum(c.isalnum() for c in raw)
    out, seen = [], 0
    for c in raw:
        if c.isalnum():
            out.append(c if seen < hit.keep_head or seen >= total - tail else "*")
            seen += 1
        else:
            out.append(c)
    return "".join(out)


def masked(text: str, lo: int, hi: int, hits: list[Hit], lead: bool = True, trail: bool = True) -> str:
    """``text[lo:hi]`` with every sensitive value in it masked (a value cut by the bounds is masked whole), with
    ``…`` where it cuts the text (at its start when ``lead``, at its end when ``trail``)."""
    lo, hi = max(lo, 0), min(hi, len(text))
    for h in hits:
        if h.start < lo < h.end:
            lo = h.start
        if h.start < hi < h.end:
            hi = h.end
    out, at = [], lo
    for h in hits:
        if h.start >= at and h.end <= hi:
            out += [text[at : h.start], mask(h, text[h.start : h.end])]
            at = h.end
    out.append(text[at:hi])
    return ("…" if lead and lo > 0 else "") + "".join(out) + ("…" if trail and hi < len(text) else "")


class _Reference:
    """What the baseline's output for one input already holds: its e-mail addresses (lower-cased), its
    digit runs as digits (phone and card numbers, however written) and its text without spaces (IBANs)."""

    __slots__ = ("compact", "digits", "emails")

    def __init__(self, flat: Mapping[str, Any]) -> None:
        joined = "\n".join(_strings(flat.values()))
        self.emails = {m.lower() for m in _EMAIL.findall(joined)} if "@" in joined else set()
        self.digits = "|".join(_NOT_DIGIT.sub("", g) for g in _DIGIT_GROUP.findall(joined))
        self.compact = _SPACE.sub("", joined).upper()

    def knows(self, kind: str, value: str) -> bool:
        if kind == "email":
            return value in self.emails
        if kind == "iban":
            return value in self.compact
        return value in self.digits  # phone (national number), card, or a digit run not parsed yet


def _strings(values: Iterable[Any]) -> Iterable[str]:
    for v in values:
        if type(v) is str:
            yield v
        elif isinstance(v, int | float) and not isinstance(v, bool):
            yield str(v)
        elif isinstance(v, dict):  # a collapsed map's members
            yield from _strings(v.values())
        elif isinstance(v, list):
            yield from _strings(v)


#: text -> whether it has an ``@`` or seven digits (remembered: a baseline text is audited against A' and B, and
#: agents repeat their texts; cleared when full)
_MAYBE: dict[str, bool] = {}
_MAYBE_MAX = 1 << 14


def _may_be_sensitive(text: str) -> bool:
    """Whether ``text`` may hold sensitive data at all (an e-mail's ``@``, a number's seven digits)."""
    known = _MAYBE.get(text)
    if known is None:
        if len(_MAYBE) >= _MAYBE_MAX:
            _MAYBE.clear()
        known = _MAYBE[text] = "@" in text or _SEVEN_DIGITS.search(text) is not None
    return known


# ------------------------------------------------------------------------------ language, truncation, words
#: How a finished text may end: sentence punctuation, closing brackets and quotes, markdown emphasis or code.
_CLOSERS = frozenset(".!?…。\uff01\uff1f\uff61)]}>\"'»”\u2019」』\uff09】\u3015`*_~")
#: Characters that decorate the last symbol (emoji variation selector, joiner, keycap, skin tones).
_DECORATION = frozenset("\ufe0f\ufe0e\u200d\u20e3")


def ends_properly(text: str) -> bool:
    """True when ``text`` ends as a finished text does: punctuation, a closing bracket or quote, an emoji."""
    t = text.rstrip()
    while t and (t[-1] in _DECORATION or "\U0001f3fb" <= t[-1] <= "\U0001f3ff"):
        t = t[:-1]
    if not t:
        return False
    c = t[-1]
    return c in _CLOSERS or unicodedata.category(c) == "So"


#: text -> (its letters, its language): agents repeat their texts
_LANGUAGES: dict[str, tuple[int, str | None]] = {}
_LANGUAGES_MAX = 1 << 16
_NOT_LETTERS = re.compile(r"[\W\d_]+")
#: A text's language is identified from its beginning (a long text costs no more than this).
_IDENTIFY_CHARS = 2000


def language_of(text: str, min_letters: int) -> str | None:
    """The language of ``text`` (ISO 639-1, e.g. ``en``) when it has ``min_letters`` letters and CLD2 identifies
    it reliably; None otherwise."""
    if len(text) < min_letters:
        return None
    known = _LANGUAGES.get(text)
    if known is None:
        known = _LANGUAGES[text] = _identify(text)
        if len(_LANGUAGES) >= _LANGUAGES_MAX:
            _LANGUAGES.clear()
    return known[1] if known[0] >= min_letters else None


def _identify(text: str) -> tuple[int, str | None]:
    letters = len(_NOT_LETTERS.sub("", text))
    import pycld2

    try:
        reliable, _, details = pycld2.detect(text[:_IDENTIFY_CHARS], isPlainText=True)
    except (pycld2.error, ValueError, TypeError):  # invalid UTF-8 (a lone surrogate)
        return letters, None
    return letters, details[0][1] if reliable and details[0][1] not in ("un", "xxx") else None


def word_pattern(words: Iterable[str]) -> re.Pattern[str]:
    """Whole words or phrases of ``words``, any case, any whitespace inside a phrase."""
    alternatives = sorted({w.lower() for w in words}, key=len, reverse=True)
    escaped = (r"\s+".join(re.escape(part) for part in w.split()) for w in alternatives)
    return re.compile(r"(?<!\w)(?:" + "|".join(escaped) + r")(?!\w)", re.IGNORECASE)


def _words_in(pattern: re.Pattern[str], text: str) -> dict[str, re.Match[str]]:
    """The listed words in ``text`` (lower-cased, whitespace normalised) with their first match."""
    out: dict[str, re.Match[str]] = {}
    for m in pattern.finditer(text):
        out.setdefault(" ".join(m.group().lower().split()), m)
    return out


# --------------------------------------------------------------------------------------------- the tally
@dataclass(frozen=True)
class _FieldAudits:
    """The audits of one path. ``declared``: audited whenever its value is a string (a rule names it, or its
    comparator is text); otherwise only when either side's value is text by the ``auto`` comparator's rule."""

    declared: bool
    sensitive: bool
    words: re.Pattern[str] | None
    language: bool
    truncated: bool
    empty: bool


_UNSET: Any = object()
#: (audit, path) -> outputs with a finding
_Counts = Counter[tuple[str, str]]


#: At most this many flagged sensitive values are remembered to be masked in the whole result.
MAX_FLAGGED = 10_000


class ContentTally:
    """Per (audit, field): outputs with a finding between the baselines (A vs A') and in the candidate (A vs B),
    per kind of finding, and masked examples of the candidate's (of its first outputs by key, however they were
    walked). One per partition of a spilled comparison, merged (:meth:`merge`)."""

    #: how much one A/A count weighs in the exact tests (below 1 when several pairs of baseline runs are pooled)
    noise_weight: float = 1.0

    def __init__(self, config: CompareConfig) -> None:
        self.settings: ContentAudits = config.audits
        self.config = config
        self.max_examples = config.max_examples
        #: [noise, candidate] counts and per-kind counts ((audit, path, kind) -> outputs)
        self.counts: list[_Counts] = [Counter(), Counter()]
        self.kinds: list[Counter[tuple[str, str, str]]] = [Counter(), Counter()]
        self.examples: dict[tuple[str, str], list[ContentExample]] = {}
        #: sensitive values the audit flagged (raw -> masked; bounded): masked wherever the result shows them
        self.flagged: dict[str, str] = {}
        self._init_caches()

    def _init_caches(self) -> None:
        self._paths: dict[str, _FieldAudits | None] = {}
        self._ref_flat: Any = None
        self._ref: _Reference | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_paths", "_ref_flat", "_ref"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_caches()

    def merge(self, other: ContentTally) -> None:
        """Add the tally of other outputs (another partition's)."""
        for mine, theirs in zip(self.counts, other.counts, strict=True):
            mine.update(theirs)
        for mine_kinds, their_kinds in zip(self.kinds, other.kinds, strict=True):
            mine_kinds.update(their_kinds)
        for raw, shown in other.flagged.items():
            if len(self.flagged) < MAX_FLAGGED:
                self.flagged.setdefault(raw, shown)
        for k, examples in other.examples.items():
            kept = self.examples.setdefault(k, [])
            kept += examples
            kept.sort(key=_order)
            del kept[self.max_examples :]

    def add(
        self,
        key: str,
        index: int,
        fa: dict[str, Any],
        fx: dict[str, Any],
        candidate: bool,
        paths: Iterable[str] | None = None,
    ) -> None:
        """Audit the texts of ``fx`` (A' or B's output) that differ from ``fa`` (A's, for the same input);
        ``paths``: where ``fx`` holds a string unlike ``fa``'s when known (the differ's), else all of fx's paths."""
        if paths is None:
            if fa == fx:
                return
            paths = fx
        min_len = self.config.text_min_length
        for p in paths:
            x = fx.get(p)
            if type(x) is not str:
                continue
            a = fa.get(p)
            if a == x:
                continue
            audits = self._paths.get(p, _UNSET)
            if audits is _UNSET:
                audits = self._paths[p] = self._resolve(p)
            if audits is None:
                continue
            a_text = a if type(a) is str else None
            if audits.declared or _is_text(x, min_len) or (a_text is not None and _is_text(a_text, min_len)):
                self._audit(key, index, p, a_text, x, fa, audits, int(candidate))

    def _resolve(self, path: str) -> _FieldAudits | None:
        """The audits of ``path``: the first matching rule of ``audits.fields`` over the global switches; None when
        none applies (ignored, or compared by a comparator that is not text and named by no audit rule)."""
        s = self.settings
        if not s.enabled or any(is_under(p, path) for p in s.ignore_patterns):
            return None
        rule = next((r for r in s.fields if is_under(r.regex, path)), None)
        compare_rule = self.config.rule_for(path)
        comparator = compare_rule.comparator if compare_rule is not None else "auto"
        if rule is None and comparator not in ("auto", "text"):
            return None

        def on(name: str) -> bool:
            value = getattr(rule, name) if rule is not None else None
            return bool(getattr(s, name) if value is None else value)

        words = [*s.words, *(rule.words if rule is not None else [])] if on("word_list") else []
        audits = _FieldAudits(
            declared=rule is not None or comparator == "text",
            sensitive=on("sensitive_data") and bool(s.sensitive_kinds),
            words=word_pattern(words) if words else None,
            language=on("language"),
            truncated=on("truncated"),
            empty=on("empty"),
        )
        return (
            audits if any((audits.sensitive, audits.words, audits.language, audits.truncated, audits.empty)) else None
        )

    def _reference(self, fa: dict[str, Any]) -> _Reference:
        """A's values (built once per baseline output: its noise pair and candidate pair come one after the other)."""
        if self._ref_flat is not fa or self._ref is None:
            self._ref_flat, self._ref = fa, _Reference(fa)
        return self._ref

    def _found(
        self,
        audit: str,
        path: str,
        side: int,
        kinds: Iterable[str],
        where: tuple[str, int],
        example: Callable[[], ContentExample],
    ) -> None:
        self.counts[side][audit, path] += 1
        for kind in kinds:
            self.kinds[side][audit, path, kind] += 1
        if side and self.max_examples:  # the first outputs by key: the same however the outputs were walked
            kept = self.examples.setdefault((audit, path), [])
            if len(kept) < self.max_examples or where < _order(kept[-1]):
                bisect.insort(kept, example(), key=_order)
                del kept[self.max_examples :]

    def _audit(
        self,
        key: str,
        index: int,
        path: str,
        a: str | None,
        x: str,
        fa: dict[str, Any],
        audits: _FieldAudits,
        side: int,
    ) -> None:
        """Every audit of ``path`` on one text ``x`` against the baseline's ``a`` (None: not a string there)."""
        s = self.settings
        where = (key, index, path)
        if not x.strip():
            if audits.empty and a is not None and a.strip():
                self._found("empty", path, side, (), where[:2], lambda: self._example_empty(where, a, x))
            return
        if audits.truncated and a is not None and not ends_properly(x) and ends_properly(a):
            self._found("truncated", path, side, (), where[:2], lambda: self._example_truncated(where, a, x))
        if audits.sensitive and _may_be_sensitive(x):
            ref = self._reference(fa)
            new = find_sensitive(x, s.sensitive_kinds, s.phone_region, ref.knows, first=True)
            if new:
                self._flag(x, new)
                kinds = sorted({h.kind for h in new})
                self._found(
                    "sensitive_data", path, side, kinds, where[:2], lambda: self._example_sensitive(where, x, ref)
                )
        if audits.words is not None:
            found = _words_in(audits.words, x)
            if found:
                new_words = found.keys() - (_words_in(audits.words, a).keys() if a is not None else set())
                if new_words:
                    words = sorted(new_words)
                    self._found(
                        "word_list", path, side, words, where[:2], lambda: self._example_word(where, x, found[words[0]])
                    )
        if audits.language and a is not None:
            lx = language_of(x, s.language_min_letters)
            la = language_of(a, s.language_min_letters) if lx is not None else None
            if la is not None and lx is not None and lx != la:
                change = (la, lx)
                self._found(
                    "language",
                    path,
                    side,
                    (f"{la} -> {lx}",),
                    where[:2],
                    lambda: self._example_language(where, a, x, *change),
                )

    def _flag(self, text: str, hits: Iterable[Hit]) -> None:
        """Remember the flagged values of ``text`` (raw -> masked) to mask them wherever the result shows them."""
        for h in hits:
            raw = text[h.start : h.end]
            if len(self.flagged) < MAX_FLAGGED and raw not in self.flagged:
                self.flagged[raw] = mask(h, raw)

    # ----------------------------------------------------------------------- examples (masked, for the reader)
    def _hits_near(self, text: str, lo: int, hi: int) -> list[Hit]:
        """Every sensitive value in and around ``text[lo:hi]`` (to mask an excerpt; a long text is not parsed whole)."""
        lo, hi = max(lo - 100, 0), min(hi + 100, len(text))
        hits = find_sensitive(text[lo:hi], SENSITIVE_KINDS, self.settings.phone_region)
        return [replace(h, start=h.start + lo, end=h.end + lo) for h in hits]

    def _example_sensitive(self, where: tuple[str, int, str], x: str, ref: _Reference) -> ContentExample:
        s = self.settings
        new = find_sensitive(x, s.sensitive_kinds, s.phone_region, ref.knows, first=True)
        h = new[0]  # the audit found one
        hits = [h, *(o for o in self._hits_near(x, h.start - 80, h.end + 80) if o.end <= h.start or o.start >= h.end)]
        hits.sort(key=lambda o: o.start)
        value = mask(h, x[h.start : h.end])
        return ContentExample(
            key=where[0],
            index=where[1],
            field=where[2],
            what=f"{_KIND_NAMES[h.kind]} {value} not in the baseline's output for this input",
            before=masked(x, h.start - 80, h.start, hits, trail=False),
            finding=value,
            after=masked(x, h.end, h.end + 80, hits, lead=False),
        )

    def _example_word(self, where: tuple[str, int, str], x: str, m: re.Match[str]) -> ContentExample:
        near = self._hits_near(x, m.start() - 80, m.end() + 80)
        hits = [h for h in near if h.end <= m.start() or h.start >= m.end()]
        return ContentExample(
            key=where[0],
            index=where[1],
            field=where[2],
            what=f"listed word {m.group()!r}, not in the baseline's text",
            before=masked(x, m.start() - 80, m.start(), hits, trail=False),
            finding=m.group(),
            after=masked(x, m.end(), m.end() + 80, hits, lead=False),
        )

    def _example_language(self, where: tuple[str, int, str], a: str, x: str, la: str, lx: str) -> ContentExample:
        return ContentExample(
            key=where[0],
            index=where[1],
            field=where[2],
            what=f"written in {lx}; the baseline's text for this input is in {la}",
            finding=masked(x, 0, 200, self._hits_near(x, 0, 200)),
            baseline=masked(a, 0, 200, self._hits_near(a, 0, 200)),
        )

    def _example_truncated(self, where: tuple[str, int, str], a: str, x: str) -> ContentExample:
        t, a_end = x.rstrip(), a.rstrip()
        cut = max(t.rfind(" "), t.rfind("\n")) + 1
        hits = self._hits_near(x, cut - 120, len(t))
        return ContentExample(
            key=where[0],
            index=where[1],
            field=where[2],
            what=f"ends mid-sentence (with {t[-1]!r}); the baseline's text for this input ends with {a_end[-1]!r}",
            before=masked(x, cut - 120, cut, hits, trail=False),
            finding=masked(t, cut, len(t), hits, lead=False, trail=False),
            baseline=masked(a, len(a_end) - 120, len(a_end), self._hits_near(a, len(a_end) - 120, len(a_end))),
        )

    def _example_empty(self, where: tuple[str, int, str], a: str, x: str) -> ContentExample:
        return ContentExample(
            key=where[0],
            index=where[1],
            field=where[2],
            what="empty text" if not x else "whitespace-only text",
            finding=json.dumps(x),
            baseline=masked(a, 0, 200, self._hits_near(a, 0, 200)),
        )


def _order(example: ContentExample) -> tuple[str, int]:
    return example.key, example.index


def mask_flagged(result: ComparisonResult, tally: ContentTally | None) -> ComparisonResult:
    """``result`` with every sensitive value the audits flagged masked wherever it shows one — the field examples
    (whole outputs side by side), the text-meaning rule's words, any reason — not only in the audits' own
    examples: a report that masks a leaked card number in one table must not print it in the next."""
    if tally is None or not tally.flagged:
        return result
    shown = dict(tally.flagged)
    pieces = _masked_pieces(shown)  # a rule that quotes a word of the value ('DE12', '3704') quotes it masked
    pattern = re.compile("|".join(
        [re.escape(raw) for raw in sorted(shown, key=len, reverse=True)]
        + [rf"(?<![0-9A-Za-z]){re.escape(piece)}(?![0-9A-Za-z])" for piece in sorted(pieces, key=len, reverse=True)]
    ))
    shown.update(pieces)

    def scrub(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(lambda m: shown[m.group(0)], value)
        if isinstance(value, list):
            return [scrub(v) for v in value]
        if isinstance(value, dict):
            return {scrub(k): scrub(v) for k, v in value.items()}
        return value

    return type(result).model_validate(scrub(result.model_dump(mode="json")))


def _masked_pieces(flagged: Mapping[str, str]) -> dict[str, str]:
    """The space-separated pieces of flagged values that their masked form hides (``3704`` -> ``****``), at least
    three characters long: the groups of an IBAN, a card number or a phone number a rule may quote one by one."""
    pieces: dict[str, str] = {}
    for raw, shown in flagged.items():
        words, masked_words = raw.split(), shown.split()
        if len(words) == len(masked_words):
            for word, hidden in zip(words, masked_words, strict=True):
                if word != hidden and len(word) >= 3:
                    pieces.setdefault(word, hidden)
    return pieces


def content_tally(config: CompareConfig) -> ContentTally | None:
    """A new tally for the config's audits, None when they are off."""
    return ContentTally(config) if config.audits.enabled else None


# ------------------------------------------------------------------------------------------- the decision
def judge_content(
    tally: ContentTally | None, n_noise: int | None, n_candidate: int, config: CompareConfig
) -> tuple[list[ContentAuditStat], list[Reason]]:
    """Per (audit, field) with a finding anywhere, its stat; and the reasons: one FAIL reason per audit that
    regressed on some field, one info reason for the findings within the baselines' own.

    With baseline-2: FAIL when the candidate's rate exceeds the A/A's (by more than ``rel_threshold`` of it, when
    the A/A has findings) and the one-sided Fisher exact test of the two counts on the window's size gives
    ``p < alpha``; tests where the A/A has findings too are Bonferroni-corrected among themselves, as the fields
    are. Without baseline-2, the exact rule: FAIL when more than ``exact_max_rate`` of the candidate's outputs
    have a finding (each finding is already new against the baseline's output for the same input)."""
    if tally is None or n_candidate <= 0:
        return [], []
    noise, cand = tally.counts
    stats = [
        _stat(tally, audit, path, n_noise, n_candidate)
        for audit, path in sorted(noise.keys() | cand.keys(), key=lambda k: (AUDITS.index(k[0]), k[1]))  # type: ignore[arg-type]
    ]
    beyond = [st for st in stats if _beyond(st, config)]
    corrected = sum(1 for st in beyond if st.noise_findings)
    for st in stats:
        if n_noise is None:
            st.status = "fail" if st.candidate_findings / n_candidate > config.exact_max_rate else "ok"
            continue
        st.alpha = config.alpha / corrected if st.noise_findings and corrected > 1 else config.alpha
        failed = st in beyond and st.p_value is not None and st.p_value < st.alpha
        st.status = "fail" if failed else "within_noise"
    return stats, _reasons(stats, n_noise is not None)


def _stat(tally: ContentTally, audit: str, path: str, n0: int | None, n1: int) -> ContentAuditStat:
    x1 = tally.counts[1][audit, path]
    x0 = tally.counts[0][audit, path] if n0 is not None else None
    st = ContentAuditStat(
        audit=audit,  # type: ignore[arg-type]
        field=path,
        candidate_findings=x1,
        candidate_n=n1,
        noise_findings=x0,
        noise_n=n0,
        kinds=_kinds_of(tally.kinds[1], audit, path),
        noise_kinds=_kinds_of(tally.kinds[0], audit, path) if n0 is not None else {},
        examples=tally.examples.get((audit, path), []),
    )
    if x0 is not None and n0:
        st.p_value = fisher_greater(x1, n1, *weighted(x0, n0, tally.noise_weight))
    return st


def _kinds_of(counts: Counter[tuple[str, str, str]], audit: str, path: str) -> dict[str, int]:
    found = [(kind, n) for (a, p, kind), n in counts.items() if a == audit and p == path]
    return dict(sorted(found, key=lambda kn: (-kn[1], kn[0])))


def _beyond(st: ContentAuditStat, config: CompareConfig) -> bool:
    """The candidate has findings more often than the A/A, by more than ``rel_threshold`` of the A/A's rate."""
    if st.noise_findings is None or not st.noise_n or not st.candidate_findings:
        return False
    p1, p0 = st.candidate_findings / st.candidate_n, st.noise_findings / st.noise_n
    return p1 > p0 and (p0 == 0 or p1 - p0 > config.rel_threshold * p0)


def _counts_msg(st: ContentAuditStat) -> str:
    said = f"{st.field} in {st.candidate_findings} of {st.candidate_n} candidate outputs"
    said += f" ({st.candidate_findings / st.candidate_n:.1%})"
    if st.noise_findings is not None and st.noise_n:
        said += f" vs {st.noise_findings} of {st.noise_n} between the baselines ({st.noise_findings / st.noise_n:.1%})"
        if st.p_value is not None:
            relation = "<" if st.status == "fail" else "≥"
            said += f", Fisher exact p = {st.p_value:.2g} {relation} alpha {st.alpha:g}"
    else:
        said += " (no baseline-2: every finding new against the baseline counts)"
    if st.kinds:
        said += " — " + ", ".join(f"{k} {n}" for k, n in list(st.kinds.items())[:4])
    return said


def _example_msg(ex: ContentExample) -> str:
    text = f"{ex.before}[[{ex.finding}]]{ex.after}".replace("\n", " ")
    return f"key {ex.key}: {ex.what}: “{text[:240]}”"


def describe_audit(st: ContentAuditStat) -> str:
    """One audit of one field in words, with its first two examples (masked): a JUnit test case's message."""
    text = f"{st.status.replace('_', ' ')}: {_FINDING[st.audit]}: {_counts_msg(st)}"
    return text + "".join(f". E.g. {_example_msg(ex)}" for ex in st.examples[:2])


def _reasons(stats: list[ContentAuditStat], has_noise: bool) -> list[Reason]:
    reasons = []
    for audit in AUDITS:
        failed = [st for st in stats if st.audit == audit and st.status == "fail"]
        if not failed:
            continue
        examples = [ex for st in failed for ex in st.examples][:2]
        message = f"{audit}: {_FINDING[audit]}: " + "; ".join(_counts_msg(st) for st in failed[:5])
        if examples:
            message += ". E.g. " + "; ".join(_example_msg(ex) for ex in examples)
        reasons.append(
            Reason(code=REASON_CODES[audit], severity="fail", message=message, fields=[st.field for st in failed])
        )
    calm = [st for st in stats if st.status != "fail" and st.candidate_findings]
    if calm:
        why = "not significantly more often than between the baselines" if has_noise else "within exact_max_rate"
        message = "; ".join(f"{st.audit}: {_counts_msg(st)}" for st in calm[:5]) + f" — {why}"
        reasons.append(
            Reason(code=WITHIN_NOISE_CODE, severity="info", message=message, fields=[st.field for st in calm])
        )
    return reasons
