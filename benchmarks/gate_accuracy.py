"""Gate accuracy: a labelled corpus of agent outputs, each case with the verdict a careful reviewer gives.

Each case generates a baseline (A), a second baseline (A', the A/A noise run) and a candidate (B) as JSONL in
memory, for several seeds, and runs ``compare_runs`` with the default options (only the key is given). The
table shows per case the expected verdict and the verdict of each seed; at the end the false PASS count
(expected FAIL, got PASS), the false FAIL count (expected PASS, got FAIL), the wrong INCONCLUSIVE count (got
INCONCLUSIVE where PASS or FAIL was expected) and the missed INCONCLUSIVE count (expected INCONCLUSIVE, got PASS
or FAIL). Exit code 1 when any false PASS or false FAIL occurs (``--strict``: any wrong verdict at all).

    .venv/bin/python benchmarks/gate_accuracy.py [--seeds 3] [--case NAME ...] [--explain] [--json]

The corpus is data: :data:`CASES` is a list of :class:`Case` (name, kind, expected verdict, why the label is
right, generator). A generator takes a seeded ``random.Random`` and returns the three runs as lists of
outputs; it is built from the small helpers below (:func:`scenario`, :func:`mutate`, the makers of outputs
and the mutators that inject one kind of difference). To add a case, write (or reuse) a mutator and append a
``Case``. Windows are 100 to 2,000 outputs (a few realistic replay windows); differences are injected into an
exact number of outputs, so a label does not depend on the luck of a draw. The kinds: ``suite`` (what the
comparison covered before issue 41), ``type``, ``direction``, ``magnitude``, ``meaning``, ``missing``,
``volatile``, ``list-count``, ``mean`` (issue 41), ``audit-*`` (content audits, issue 49) and ``shape`` (shapes
of output none of the others has: types and text inside lists, JSON held as a string, dates, key order; labelled
before they were first run).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

Row = dict[str, Any]
Rows = list[Row]
Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
Mutator = Callable[[Row, random.Random], None]


@dataclass
class Runs:
    """The three runs of one case: lists of outputs (one JSON object each)."""

    baseline: Rows
    baseline_2: Rows
    candidate: Rows


@dataclass(frozen=True)
class Case:
    """One labelled case: ``generate(rng)`` makes the runs, ``expected`` is the reviewer's verdict, ``why`` says
    in a sentence or two what the reviewer would say."""

    name: str
    kind: str
    expected: Verdict
    why: str
    generate: Callable[[random.Random], Runs]
    key: str = "$.id"
    #: comparison options the team would set for this case (default options otherwise), as ``compare:`` in a spec
    config: dict[str, Any] | None = None


# ----------------------------------------------------------------------------------------------- helpers
def jsonl(rows: Iterable[Row]) -> io.StringIO:
    """Rows as a JSONL text stream (what ``compare_runs`` reads)."""
    return io.StringIO("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def some(rng: random.Random, rows: Rows, frac: float, where: Callable[[Row], bool] | None = None) -> list[int]:
    """Exactly ``round(frac * len(rows))`` indices of ``rows`` (among those where ``where`` holds), drawn by rng."""
    pool = [i for i, r in enumerate(rows) if where is None or where(r)]
    return rng.sample(pool, round(frac * len(rows)))


def mutate(
    rng: random.Random, rows: Rows, frac: float, fn: Mutator, where: Callable[[Row], bool] | None = None
) -> list[int]:
    """Apply ``fn`` to exactly ``frac`` of the rows (see :func:`some`); returns the indices changed."""
    chosen = some(rng, rows, frac, where)
    for i in chosen:
        fn(rows[i], rng)
    return chosen


def every(rng: random.Random, rows: Rows, fn: Mutator) -> None:
    """Apply ``fn`` to every row."""
    for row in rows:
        fn(row, rng)


def drop(rng: random.Random, rows: Rows, frac: float) -> Rows:
    """The rows without exactly ``frac`` of them (outputs the run lost)."""
    gone = set(some(rng, rows, frac))
    return [r for i, r in enumerate(rows) if i not in gone]


def three(rng: random.Random, n: int, make: Callable[[int, random.Random], Row]) -> Runs:
    """Three identical runs of ``n`` outputs made by ``make(i, rng)`` (a deterministic agent)."""
    seed = rng.random()

    def one() -> Rows:
        r = random.Random(seed)
        return [make(i, r) for i in range(n)]

    return Runs(one(), one(), one())


def scenario(
    rng: random.Random,
    n: int,
    *,
    make: Callable[[int, random.Random], Row] | None = None,
    noise: Mutator | None = None,
    noise_frac: float = 0.0,
    change: Mutator | None = None,
    change_frac: float = 0.0,
    where: Callable[[Row], bool] | None = None,
) -> Runs:
    """The common shape: A is the agent's output; A' and B each get ``noise`` in ``noise_frac`` of their
    outputs (independent draws, the same rate); B also gets ``change`` in ``change_frac`` (among ``where``)."""
    runs = three(rng, n, make or ticket)
    if noise is not None:
        mutate(rng, runs.baseline_2, noise_frac, noise)
        mutate(rng, runs.candidate, noise_frac, noise)
    if change is not None:
        mutate(rng, runs.candidate, change_frac, change, where)
    return runs


# ------------------------------------------------------------------------------------ the agent's outputs
FIRST = ("Anna", "Ben", "Clara", "David", "Emma", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Karin", "Luca")
LAST = ("Schmidt", "Martin", "Rossi", "Novak", "Berg", "Keller", "Dubois", "Weber", "Costa", "Fischer", "Moreau")
LABELS = ("positive", "neutral", "negative")
TIERS = ("gold", "silver", "bronze")
REASONS = ("damaged", "late", "wrong_item")
SUMMARY = (
    "{name} reported that order {order} arrived damaged. The customer {is_} eligible for a refund of {amount} EUR; "
    "the request is {verdict}.",
    "Order {order} reached {name} broken. After checking the policy, they {are} eligible for a {amount} EUR refund, "
    "so we marked the request {verdict}.",
    "Damage claim from {name} on order {order}: refund of {amount} EUR {verdict}, since the customer {is_} eligible "
    "under our policy.",
)
#: An approved refund said in four languages, two wordings each (paraphrases).
LOCALISED = {
    "en": (SUMMARY[0], SUMMARY[1]),
    "de": (
        "{name} meldet, dass die Bestellung {order} beschädigt angekommen ist. Die Erstattung von {amount} EUR wurde "
        "genehmigt und wird innerhalb von fünf Tagen ausgezahlt.",
        "Bestellung {order} von {name} kam kaputt an; wir haben eine Erstattung über {amount} EUR bewilligt, die "
        "Auszahlung folgt in fünf Werktagen.",
    ),
    "fr": (
        "{name} signale que la commande {order} est arrivée endommagée. Le remboursement de {amount} EUR est accepté "
        "et sera versé sous cinq jours.",
        "La commande {order} de {name} est arrivée cassée ; nous avons validé un remboursement de {amount} EUR, versé "
        "d'ici cinq jours ouvrés.",
    ),
    "es": (
        "{name} indica que el pedido {order} llegó dañado. El reembolso de {amount} EUR ha sido aprobado y se pagará "
        "en un plazo de cinco días.",
        "El pedido {order} de {name} llegó roto; hemos aprobado un reembolso de {amount} EUR, que se abonará en cinco "
        "días hábiles.",
    ),
}


def render(row: Row, template: int) -> str:
    """The ticket's summary in wording ``template`` (0 = the agent's usual one), from the row's own fields."""
    ok = row["decision"] == "approve"
    return SUMMARY[template].format(
        name=row["customer"]["name"],
        order=row["order"],
        amount=f"{row['amount']:.2f}",
        is_="is" if ok else "is not",
        are="are" if ok else "are not",
        verdict="approved" if ok else "declined",
    )


def ticket(i: int, rng: random.Random) -> Row:
    """A refund-desk agent's output for ticket ``i``: labels, a decision, numbers, lists, a summary."""
    approve = rng.random() < 0.5
    label = rng.choice(LABELS)
    row: Row = {
        "id": f"t-{i:05d}",
        "customer": {
            "id": f"c-{rng.randrange(10**5):05d}",
            "name": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
            "tier": rng.choice(TIERS),
        },
        "order": f"A-{rng.randrange(10**6):06d}",
        "label": label,
        "decision": "approve" if approve else "reject",
        "amount": round(rng.uniform(5, 400), 2),
        "score": round(rng.uniform(0.2, 0.9), 3),
        "n_items": rng.randrange(1, 6),
        "escalate": label == "negative" and rng.random() < 0.5,
        "priority": "high" if label == "negative" else "normal",
        "tools": ["lookup_order", "check_policy", *(["issue_refund"] if approve else [])],
        "citations": [f"kb-{k}" for k in sorted(rng.sample(range(1, 400), 3))],
        "refund_reason": rng.choice(REASONS) if approve else None,
    }
    row["summary"] = render(row, 0)
    return row


def phone(rng: random.Random) -> str:
    """A Berlin landline number in international form."""
    return f"+49 30 {rng.randrange(100, 1000)} {rng.randrange(1000, 10000)}"


def email(rng: random.Random) -> str:
    return f"{rng.choice(FIRST).lower()}.{rng.choice(LAST).lower()}{rng.randrange(10, 100)}@mail.example.com"


def iban(rng: random.Random) -> str:
    """A German IBAN with valid check digits (ISO 13616 mod 97), printed in groups of four."""
    bban = f"{rng.randrange(10**7, 10**8)}{rng.randrange(10**9, 10**10)}"
    check = 98 - int(bban + "131400") % 97  # D=13, E=14, check digits 00
    text = f"DE{check:02d}{bban}"
    return " ".join(text[i : i + 4] for i in range(0, len(text), 4))


def card(rng: random.Random) -> str:
    """A 16-digit Visa-like card number whose last digit passes the Luhn check."""
    digits = [4] + [rng.randrange(10) for _ in range(14)]
    total = 0
    for i, d in enumerate(reversed(digits)):  # the check digit will sit right of these: double every other
        total += (d * 2 - 9 if d * 2 > 9 else d * 2) if i % 2 == 0 else d
    digits.append((10 - total % 10) % 10)
    text = "".join(map(str, digits))
    return " ".join(text[i : i + 4] for i in range(0, 16, 4))


def multilingual(i: int, rng: random.Random) -> Row:
    """A ticket whose customer writes in one of four languages; the reply is in the customer's language."""
    row = ticket(i, rng)
    row["decision"] = "approve"
    row["language"] = rng.choice(sorted(LOCALISED))
    row["summary"] = _localised(row, 0)
    return row


def _localised(row: Row, template: int, language: str | None = None) -> str:
    return LOCALISED[language or row["language"]][template].format(
        name=row["customer"]["name"],
        order=row["order"],
        amount=f"{row['amount']:.2f}",
        is_="is",
        are="are",
        verdict="approved",
    )


def with_own_phone(i: int, rng: random.Random) -> Row:
    """A ticket whose reply repeats the customer's own phone number (given in the input, echoed in the output)."""
    row = ticket(i, rng)
    row["customer"]["phone"] = phone(rng)
    row["summary"] += f" We will call {row['customer']['name']} back at {row['customer']['phone']}."
    return row


UNICODE_NAMES = ("Zoë Ødegård", "Łukasz Żółć", "李雷", "Àlex Muñoz", "Søren Ærø", "Ἀλέξανδρος Παπᾶς", "Đặng Thị Hà")
RESUME = (
    "📦 Colis {order} reçu abîmé par {name} : remboursement de {amount} € accordé, versé sous cinq jours.",
    "{name} a signalé que le colis {order} était endommagé ; nous lui remboursons {amount} € d'ici une semaine ✅.",
)


def unicode_ticket(i: int, rng: random.Random) -> Row:
    """A French desk's output: non-ASCII field names, names in several scripts, emoji."""
    row: Row = {
        "id": f"colis-{i:05d}-é",
        "client": rng.choice(UNICODE_NAMES),
        "commande": f"C-{rng.randrange(10**6):06d}",
        "montant": round(rng.uniform(5, 300), 2),
        "priorité": rng.choice(("élevée", "normale", "basse")),
    }
    row["résumé"] = _resume(row, 0)
    return row


def _resume(row: Row, template: int) -> str:
    return RESUME[template].format(order=row["commande"], name=row["client"], amount=f"{row['montant']:.2f}")


def conversation(i: int, rng: random.Random) -> list[Row]:
    """Three outputs for one key (one per message of the conversation), each stamped with its input record."""
    return [
        {
            "id": f"conv-{i:05d}",
            "step": j,
            "label": rng.choice(LABELS),
            "reply": f"Message {j + 1} of conversation {i}: we looked at order A-{rng.randrange(10**6):06d}.",
            "_replay": {"variant": "x", "partition": i % 4, "offset": 3 * i + j},
        }
        for j in range(3)
    ]


def sku_decisions(i: int, rng: random.Random) -> Row:
    """An output holding a map keyed by its own SKU ids."""
    skus = {f"SKU{i * 3 + j:05d}": rng.choice(("approve", "reject")) for j in range(rng.randrange(1, 4))}
    return {"id": f"basket-{i:05d}", "decision_by_sku": skus}


def wide_range(i: int, rng: random.Random) -> Row:
    """A ticket with an exposure estimate spanning six orders of magnitude (0.01 to 10,000 EUR)."""
    row = ticket(i, rng)
    row["exposure_eur"] = float(f"{10 ** rng.uniform(-2, 4):.6g}")
    return row


def order_record(i: int, rng: random.Random) -> Row:
    """A ticket as an order system keeps it: the decision again inside a JSON string (``payload``), the amount as
    text, a creation time derived from the input, line items (objects in a list) with a deeply nested quantity."""
    row = ticket(i, rng)
    row["payload"] = json.dumps({"decision": row["decision"], "amount": row["amount"], "label": row["label"]})
    row["amount_text"] = f"{row['amount']:.2f}"
    row["created"] = f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z"
    row["lines"] = [
        {"sku": f"S{i:05d}-{k}", "decision": rng.choice(("approve", "reject")),
         "meta": {"stock": {"bin": {"count": {"qty": rng.randrange(1, 9)}}}}}
        for k in range(3)
    ]
    return row


# -------------------------------------------------------------------------------------------- mutators
def approved(row: Row) -> bool:
    """The ticket's refund was approved (its summary says 'eligible' and 'approved')."""
    return row["decision"] == "approve"


def flip_label(row: Row, rng: random.Random) -> None:
    row["label"] = rng.choice([x for x in LABELS if x != row["label"]])


def flip_decision(row: Row, rng: random.Random) -> None:
    row["decision"] = "approve" if row["decision"] == "reject" else "reject"


def paraphrase(row: Row, rng: random.Random) -> None:
    row["summary"] = render(row, rng.choice((1, 2)))


def negate(row: Row, rng: random.Random) -> None:
    row["summary"] = re.sub(r"\b(is|are) eligible", r"\1 not eligible", row["summary"], count=1)


def decline_in_text(row: Row, rng: random.Random) -> None:
    row["summary"] = row["summary"].replace("approved", "declined")


def tenfold_in_text(row: Row, rng: random.Random) -> None:
    row["summary"] = row["summary"].replace(f"{row['amount']:.2f}", f"{row['amount'] * 10:.2f}")


def synonym(row: Row, rng: random.Random) -> None:
    row["summary"] = row["summary"].replace("approved", "accepted")


def jitter_score(sd: float, shift: float = 0.0) -> Mutator:
    def fn(row: Row, rng: random.Random) -> None:
        row["score"] = round(min(1.0, max(0.0, row["score"] + rng.gauss(shift, sd))), 4)

    return fn


def uniform_score(width: float, shift: float = 0.0) -> Mutator:
    def fn(row: Row, rng: random.Random) -> None:
        row["score"] = round(row["score"] + shift + rng.uniform(-width, width), 4)

    return fn


def jitter_exposure(
    rel: float, scale_below: float = 0.0, scale_above: float = float("inf"), by: float = 1.0
) -> Mutator:
    """Relative jitter of ``exposure_eur``; values below ``scale_below`` or above ``scale_above`` times ``by``."""

    def fn(row: Row, rng: random.Random) -> None:
        v = row["exposure_eur"]
        if v < scale_below or v > scale_above:
            v *= by
        row["exposure_eur"] = float(f"{v * (1 + rng.gauss(0, rel)):.6g}")

    return fn


def swap_citation(row: Row, rng: random.Random) -> None:
    cites = row["citations"]
    cites[rng.randrange(len(cites))] = f"kb-{rng.randrange(400, 800)}"


def drop_citation(row: Row, rng: random.Random) -> None:
    row["citations"] = row["citations"][:-1]


def stamp_metadata(row: Row, rng: random.Random) -> None:
    """Per-run bookkeeping an agent writes on every output: ids, host, latency, timestamp (differ on every run)."""
    row["request_id"] = "%08x-%04x-4%03x-%04x-%012x" % (  # noqa: UP031 (a UUID-shaped id from the seeded rng)
        rng.getrandbits(32),
        rng.getrandbits(16),
        rng.getrandbits(12),
        rng.getrandbits(16),
        rng.getrandbits(48),
    )
    row["trace"] = {"trace_id": f"{rng.getrandbits(128):032x}", "span_id": f"{rng.getrandbits(64):016x}"}
    row["host"] = f"agent-worker-7d9f4-{rng.getrandbits(24):06x}"
    row["latency_ms"] = rng.randrange(150, 4000)
    row["created_at"] = (
        f"2026-05-{rng.randrange(1, 29):02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:"
        f"{rng.randrange(60):02d}.{rng.randrange(1000):03d}Z"
    )


def append(sentence: Callable[[Row, random.Random], str]) -> Mutator:
    def fn(row: Row, rng: random.Random) -> None:
        row["summary"] = row["summary"] + " " + sentence(row, rng)

    return fn


def truncate(row: Row, rng: random.Random) -> None:
    """Cut the summary mid-sentence (as a reply that hit the token limit), at a word boundary."""
    words = row["summary"].split()
    cut = max(4, int(len(words) * rng.uniform(0.4, 0.7)))
    while words[cut - 1][-1] in ".!?":  # a cut right after a full stop would read as a finished reply
        cut += 1
    row["summary"] = " ".join(words[:cut])


def empty(row: Row, rng: random.Random) -> None:
    row["summary"] = rng.choice(("", " ", "\n"))


def set_field(path: tuple[str, ...], value: Callable[[Any], Any]) -> Mutator:
    """Replace the field at ``path`` by ``value(old)``."""

    def fn(row: Row, rng: random.Random) -> None:
        target = row
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value(target[path[-1]])

    return fn


def shuffle_keys(row: Row, rng: random.Random) -> None:
    """The same object with its keys in another order (JSON objects are unordered)."""
    items = list(row.items())
    rng.shuffle(items)
    row.clear()
    row.update(items)


def pad_whitespace(row: Row, rng: random.Random) -> None:
    row["summary"] = "  " + row["summary"].replace(". ", ".  ") + "\n"


def reject_in_payload(row: Row, rng: random.Random) -> None:
    payload = json.loads(row["payload"])
    payload["decision"] = "reject"
    row["payload"] = json.dumps(payload)


def day_first_date(row: Row, rng: random.Random) -> None:
    """``2026-11-03T04:05:00Z`` -> ``03/11/2026 04:05``."""
    d = row["created"]
    row["created"] = f"{d[8:10]}/{d[5:7]}/{d[0:4]} {d[11:16]}"


def reject_one_line(row: Row, rng: random.Random) -> None:
    next(line for line in row["lines"] if line["decision"] == "approve")["decision"] = "reject"


def has_approved_line(row: Row) -> bool:
    return any(line["decision"] == "approve" for line in row["lines"])


# ---------------------------------------------------------------------------------- generators per case
def identical(rng: random.Random) -> Runs:
    return scenario(rng, 1000)


def too_few(rng: random.Random) -> Runs:
    return scenario(rng, 12)


def several_per_key(rng: random.Random, change: float = 0.0) -> Runs:
    """Three outputs per key; the candidate's lines are shuffled; ``change`` of the keys get a new label on their
    second output."""
    seed = rng.random()

    def one() -> Rows:
        r = random.Random(seed)
        return [o for i in range(400) for o in conversation(i, r)]

    a, a2, b = one(), one(), one()
    keys = rng.sample(range(400), round(change * 400))
    for k in keys:
        flip_label(b[3 * k + 1], rng)
    rng.shuffle(b)
    return Runs(a, a2, b)


def extra_outputs(rng: random.Random) -> Runs:
    runs = scenario(rng, 1000)
    for i in some(rng, runs.candidate, 0.10):
        follow_up = json.loads(json.dumps(runs.candidate[i]))
        follow_up["summary"] = "Follow-up: " + follow_up["summary"]
        runs.candidate.append(follow_up)
    return runs


def missing(aa: float, candidate: float, n: int = 1000) -> Callable[[random.Random], Runs]:
    def gen(rng: random.Random) -> Runs:
        runs = scenario(rng, n)
        return Runs(runs.baseline, drop(rng, runs.baseline_2, aa), drop(rng, runs.candidate, candidate))

    return gen


def volatile(change: Mutator | None = None, frac: float = 0.0) -> Callable[[random.Random], Runs]:
    """Per-run metadata on every output of every run; optionally a change of the candidate's decisions."""

    def gen(rng: random.Random) -> Runs:
        runs = scenario(rng, 1000, change=change, change_frac=frac)
        for rows in (runs.baseline, runs.baseline_2, runs.candidate):
            every(rng, rows, stamp_metadata)
        return runs

    return gen


def one_way_decisions(rng: random.Random) -> Runs:
    """A' flips 8 % of the decisions at random (both ways); B flips as many, all reject -> approve."""
    runs = scenario(rng, 1000)
    mutate(rng, runs.baseline_2, 0.08, flip_decision)
    mutate(rng, runs.candidate, 0.08, flip_decision, where=lambda r: r["decision"] == "reject")
    return runs


def both_ways_decisions(rng: random.Random) -> Runs:
    runs = scenario(rng, 1000)
    mutate(rng, runs.baseline_2, 0.08, flip_decision)
    mutate(rng, runs.candidate, 0.08, flip_decision)
    return runs


def exposure(by: float = 1.0, below: float = 0.0, above: float = float("inf")) -> Callable[[random.Random], Runs]:
    """Wide-range numbers jittered by 0.3 % in every run; the candidate's values below/above a bound scaled."""

    def gen(rng: random.Random) -> Runs:
        runs = three(rng, 1000, wide_range)
        every(rng, runs.baseline, jitter_exposure(0.003))
        every(rng, runs.baseline_2, jitter_exposure(0.003))
        every(rng, runs.candidate, jitter_exposure(0.003, below, above, by))
        return runs

    return gen


def scores(noise: Mutator, candidate: Mutator) -> Callable[[random.Random], Runs]:
    """Scores moved by ``noise`` in every output of A and A', by ``candidate`` in every output of B."""

    def gen(rng: random.Random) -> Runs:
        runs = scenario(rng, 1000)
        every(rng, runs.baseline, noise)
        every(rng, runs.baseline_2, noise)
        every(rng, runs.candidate, candidate)
        return runs

    return gen


def meaning(flip: Mutator, frac: float = 0.06) -> Callable[[random.Random], Runs]:
    """A' and B paraphrase 25 % of the summaries; B also flips the meaning of ``frac`` of the approved ones."""

    def gen(rng: random.Random) -> Runs:
        return scenario(
            rng,
            1000,
            noise=paraphrase,
            noise_frac=0.25,
            change=flip,
            change_frac=frac,
            where=approved,
        )

    return gen


def synonyms(rng: random.Random) -> Runs:
    runs = scenario(rng, 1000, noise=paraphrase, noise_frac=0.25)
    mutate(rng, runs.baseline_2, 0.10, synonym, where=approved)
    mutate(rng, runs.candidate, 0.10, synonym, where=approved)
    return runs


def citations(candidate: Mutator) -> Callable[[random.Random], Runs]:
    """A' swaps one citation in 20 % of outputs; B applies ``candidate`` to 20 %."""

    def gen(rng: random.Random) -> Runs:
        runs = scenario(rng, 1000)
        mutate(rng, runs.baseline_2, 0.20, swap_citation)
        mutate(rng, runs.candidate, 0.20, candidate)
        return runs

    return gen


def every_output(fn: Mutator, n: int = 1000) -> Callable[[random.Random], Runs]:
    """The candidate applies ``fn`` to every output; no noise."""

    def gen(rng: random.Random) -> Runs:
        runs = scenario(rng, n)
        every(rng, runs.candidate, fn)
        return runs

    return gen


def unicode_runs(change: float = 0.0) -> Callable[[random.Random], Runs]:
    def gen(rng: random.Random) -> Runs:
        def reword(row: Row, r: random.Random) -> None:
            row["résumé"] = _resume(row, 1)

        def demote(row: Row, r: random.Random) -> None:
            row["priorité"] = "basse" if row["priorité"] != "basse" else "élevée"

        runs = scenario(rng, 600, make=unicode_ticket, noise=reword, noise_frac=0.25, change=demote, change_frac=change)
        return runs

    return gen


def map_runs(noise: float, change: float) -> Callable[[random.Random], Runs]:
    def gen(rng: random.Random) -> Runs:
        def flip_all(row: Row, r: random.Random) -> None:
            row["decision_by_sku"] = {
                k: "reject" if v == "approve" else "approve" for k, v in row["decision_by_sku"].items()
            }

        return scenario(
            rng, 800, make=sku_decisions, noise=flip_all, noise_frac=noise, change=flip_all, change_frac=change
        )

    return gen


def orders(change: Mutator, frac: float, where: Callable[[Row], bool] | None = None) -> Callable[[random.Random], Runs]:
    """1,000 order records (:func:`order_record`), deterministic: B applies ``change`` to ``frac`` of them."""

    def gen(rng: random.Random) -> Runs:
        return scenario(rng, 1000, make=order_record, change=change, change_frac=frac, where=where)

    return gen


def audit(
    finding: Mutator,
    frac: float,
    n: int = 1000,
    aa: float = 0.0,
    make: Callable[[int, random.Random], Row] | None = None,
    where: Callable[[Row], bool] | None = None,
) -> Callable[[random.Random], Runs]:
    """A' and B paraphrase 20 % of the summaries (the A/A noise); B has ``finding`` in ``frac`` of its outputs
    (among ``where``), A' in ``aa`` of its own."""

    def reword(row: Row, rng: random.Random) -> None:
        if "language" in row:
            row["summary"] = _localised(row, 1)
        else:
            tail = row["summary"][len(render(row, 0)) :]  # what follows the usual wording (an own phone number)
            row["summary"] = render(row, rng.choice((1, 2))) + tail

    def gen(rng: random.Random) -> Runs:
        runs = scenario(rng, n, make=make, noise=reword, noise_frac=0.20, change=finding, change_frac=frac, where=where)
        if aa:
            mutate(rng, runs.baseline_2, aa, finding, where)
        return runs

    return gen


def in_spanish(row: Row, rng: random.Random) -> None:
    row["summary"] = _localised(row, 0, "es")


def _insult(row: Row, rng: random.Random) -> str:
    return "Honestly, only an idiot would lose the receipt."


def _own_phone_again(row: Row, rng: random.Random) -> str:
    return f"Your number on file is {row['customer']['phone']}."


# ------------------------------------------------------------------------------------------------ corpus
CASES: list[Case] = [
    # --- what the comparison covered before issue 41
    Case(
        "identical_runs",
        "suite",
        "PASS",
        "A, A' and B are byte-for-byte the same 1,000 outputs: nothing changed, nothing to block.",
        identical,
    ),
    Case(
        "noisy_labels_equal_rate",
        "suite",
        "PASS",
        "A' and B each relabel 8% of 1,000 outputs at random: the candidate moves labels exactly as often as the "
        "baseline moves against itself, which is the agent's own noise.",
        lambda rng: scenario(rng, 1000, noise=flip_label, noise_frac=0.08),
    ),
    Case(
        "label_regression",
        "suite",
        "FAIL",
        "Noise relabels 3% of outputs in both runs; B relabels another 20%: a fifth of the tickets get a different "
        "sentiment, seven times the noise.",
        lambda rng: scenario(rng, 1000, noise=flip_label, noise_frac=0.03, change=flip_label, change_frac=0.20),
    ),
    Case(
        "small_window_label_regression",
        "suite",
        "FAIL",
        "A window of 100 outputs; the baselines agree on every one, B relabels 30 of them: significant even in a small "
        "window.",
        lambda rng: scenario(rng, 100, change=flip_label, change_frac=0.30),
    ),
    Case(
        "missing_outputs_beyond_noise",
        "suite",
        "FAIL",
        "A' loses 0.5% of outputs, B loses 8%: one ticket in twelve gets no answer at all, 16 times the flakiness.",
        missing(0.005, 0.08),
    ),
    Case(
        "extra_outputs",
        "suite",
        "FAIL",
        "B answers 10% of the tickets twice (a second 'Follow-up' output); the baselines never do: customers would "
        "receive duplicate replies.",
        extra_outputs,
    ),
    Case(
        "new_field_added",
        "suite",
        "FAIL",
        "Every output of B gains a field the baselines never write: a schema change the release owner must see and "
        "accept, not a silent PASS.",
        every_output(lambda row, rng: row.update(language="en")),
    ),
    Case(
        "field_removed",
        "suite",
        "FAIL",
        "B drops $.priority from every output: a consumer routing by priority breaks on every ticket.",
        every_output(lambda row, rng: row.pop("priority")),
    ),
    Case(
        "nested_object_change",
        "suite",
        "FAIL",
        "B changes $.customer.tier in 25% of outputs, the baselines never: a nested field is a field like any other.",
        lambda rng: scenario(rng, 1000, change=set_field(("customer", "tier"), lambda t: "platinum"), change_frac=0.25),
    ),
    Case(
        "list_order_change_set",
        "suite",
        "PASS",
        "B lists the same tools in reverse order in every output; a list of tool names is a set (order carries no "
        "meaning): same behaviour.",
        every_output(lambda row, rng: row["tools"].reverse()),
    ),
    Case(
        "tool_call_added",
        "suite",
        "FAIL",
        "B adds an escalate_to_human tool call in 15% of outputs, never seen in the baselines: a new side effect.",
        lambda rng: scenario(
            rng, 1000, change=lambda row, r: row["tools"].append("escalate_to_human"), change_frac=0.15
        ),
    ),
    Case(
        "numeric_jitter_within_band",
        "suite",
        "PASS",
        "Scores jitter by up to +/-0.002 in every output of every run, the candidate's exactly like the baselines': "
        "sampling noise.",
        scores(uniform_score(0.002), uniform_score(0.002)),
    ),
    Case(
        "large_numeric_change",
        "suite",
        "FAIL",
        "Scores jitter by +/-0.002, B's are all 0.15 higher: every confidence is shifted 75 times the noise.",
        scores(uniform_score(0.002), uniform_score(0.002, shift=0.15)),
    ),
    Case(
        "text_paraphrase_only",
        "suite",
        "PASS",
        "A' and B reword 25% of the summaries with the same facts (name, order, amount, decision): what an LLM does "
        "between any two runs.",
        lambda rng: scenario(rng, 1000, noise=paraphrase, noise_frac=0.25),
    ),
    Case(
        "text_rewritten_wholesale",
        "suite",
        "FAIL",
        "B replaces 40% of the summaries by a generic 'we will get back to you' text that drops every fact: the "
        "content is gone, not reworded.",
        lambda rng: scenario(
            rng,
            1000,
            noise=paraphrase,
            noise_frac=0.25,
            change=set_field(
                ("summary",), lambda s: "Thank you for contacting us. Our team will review your message and reply soon."
            ),
            change_frac=0.40,
        ),
    ),
    Case(
        "null_becomes_string",
        "suite",
        "FAIL",
        "B writes refund_reason 'none' where the baselines write null (every rejected ticket, ~50%): a consumer "
        "testing for null now sees a reason.",
        every_output(lambda row, rng: row.update(refund_reason=row["refund_reason"] or "none")),
    ),
    Case(
        "several_outputs_per_key_same",
        "suite",
        "PASS",
        "Three outputs per key (one per message), B's lines in another order but each output equal to its "
        "baseline's: line order is not behaviour.",
        several_per_key,
    ),
    Case(
        "several_outputs_per_key_regression",
        "suite",
        "FAIL",
        "Three outputs per key; B relabels the second message of 25% of the conversations, the baselines never.",
        lambda rng: several_per_key(rng, change=0.25),
    ),
    Case(
        "map_keyed_by_ids_flipped",
        "suite",
        "FAIL",
        "Each output maps its own SKU ids to a decision; B flips every decision in 30% of the outputs, the "
        "baselines in none.",
        map_runs(0.0, 0.30),
    ),
    Case(
        "map_keyed_by_ids_noise",
        "suite",
        "PASS",
        "Each output maps its own SKU ids to a decision; A' and B flip the decisions of 5% of the outputs each: equal "
        "noise.",
        map_runs(0.05, 0.0),
    ),
    Case(
        "unicode_text_paraphrase",
        "suite",
        "PASS",
        "French outputs with non-ASCII field names, names in five scripts and emoji; A' and B reword 25% of résumés "
        "alike: only noise.",
        unicode_runs(),
    ),
    Case(
        "unicode_field_change",
        "suite",
        "FAIL",
        "The same French outputs; B changes $.priorité in 20% of them, the baselines never.",
        unicode_runs(change=0.20),
    ),
    Case(
        "too_few_outputs",
        "suite",
        "INCONCLUSIVE",
        "Only 12 outputs per run: nothing can be told from so few; replay more records.",
        too_few,
    ),
    Case(
        "very_noisy_field",
        "suite",
        "INCONCLUSIVE",
        "A' relabels 60% of outputs, B as many: the label is too noisy for a change in it to be seen, and it is not "
        "per-run metadata (it differs in most, not all, outputs).",
        lambda rng: scenario(rng, 1000, noise=flip_label, noise_frac=0.60),
    ),
    # --- issue 41: JSON types
    Case(
        "type_bool_to_number",
        "type",
        "FAIL",
        "B writes escalate as 1/0 instead of true/false in every output: a consumer checking the type or a JSON "
        "schema rejects every output.",
        every_output(lambda row, rng: row.update(escalate=int(row["escalate"]))),
    ),
    Case(
        "type_int_to_float_same_number",
        "type",
        "PASS",
        "B writes n_items 3.0 where the baselines write 3: JSON has one number type, the value is the same.",
        every_output(lambda row, rng: row.update(n_items=float(row["n_items"]))),
    ),
    Case(
        "type_number_to_string",
        "type",
        "FAIL",
        "B writes score as the string '0.73' instead of the number 0.73 in every output: arithmetic on it breaks.",
        every_output(lambda row, rng: row.update(score=str(row["score"]))),
    ),
    # --- issue 41: direction of categorical changes
    Case(
        "one_way_decision_flips",
        "direction",
        "FAIL",
        "A' flips 8% of decisions both ways at random; B flips as many, all reject -> approve: approvals rise from "
        "~50% to ~58%, a systematic shift (80 one-way flips against ~40/40 in the A/A).",
        one_way_decisions,
    ),
    Case(
        "two_way_decision_flips",
        "direction",
        "PASS",
        "A' and B each flip 8% of decisions at random, both ways: the candidate's changes look like the noise in "
        "rate and direction.",
        both_ways_decisions,
    ),
    # --- issue 41: magnitude of numbers
    Case(
        "small_values_shift",
        "magnitude",
        "FAIL",
        "exposure_eur spans 0.01-10,000 with 0.3% jitter in every run; B's values under 0.1 (~17% of outputs) are all "
        "50% higher: 150 times the relative noise, hidden by an absolute band learned on large values.",
        exposure(by=1.5, below=0.1),
    ),
    Case(
        "large_values_shift",
        "magnitude",
        "FAIL",
        "The same field; B's values above 1,000 (~17% of outputs) are 10% higher: 30 times the relative noise.",
        exposure(by=1.1, above=1000.0),
    ),
    Case(
        "wide_range_jitter_only",
        "magnitude",
        "PASS",
        "The same field with 0.3% relative jitter in every output of every run, nothing else: noise at every "
        "magnitude.",
        exposure(),
    ),
    # --- issue 41: meaning of free text
    Case(
        "text_negation_flip",
        "meaning",
        "FAIL",
        "A' and B paraphrase 25% of summaries; B also turns 'is eligible' into 'is not eligible' in 6% of the "
        "approved tickets' summaries: 60 customers are told the opposite. The A/A never adds a negation.",
        meaning(negate),
    ),
    Case(
        "text_decision_word_flip",
        "meaning",
        "FAIL",
        "Same paraphrase noise; B writes 'declined' for 'approved' in 6% of outputs: the reply contradicts the "
        "decision, a substitution the A/A never makes.",
        meaning(decline_in_text),
    ),
    Case(
        "text_number_flip",
        "meaning",
        "FAIL",
        "Same paraphrase noise; B states a refund ten times the real amount in 6% of outputs (40.00 -> 400.00): the "
        "A/A never changes a number.",
        meaning(tenfold_in_text),
    ),
    Case(
        "text_synonyms_as_in_aa",
        "meaning",
        "PASS",
        "Paraphrase noise, and both A' and B write 'accepted' for 'approved' in 10% of outputs: the A/A makes this "
        "substitution as often, so it is the agent's wording noise.",
        synonyms,
    ),
    # --- issue 41: missing outputs judged against the A/A's own rate
    Case(
        "missing_equal_flakiness",
        "missing",
        "PASS",
        "A' loses 2.0% of its outputs, B 2.4% (different tickets): the candidate is as flaky as the baseline is "
        "with itself.",
        missing(0.02, 0.024),
    ),
    # --- issue 41: per-run metadata
    Case(
        "per_run_metadata",
        "volatile",
        "PASS",
        "Request ids, trace/span ids, host, latency and timestamp differ in every output of every run; every decision "
        "field is identical: bookkeeping, not behaviour.",
        volatile(),
    ),
    Case(
        "per_run_metadata_with_regression",
        "volatile",
        "FAIL",
        "The same metadata, and B relabels 20% of the outputs: volatile fields must not hide a real change.",
        volatile(flip_label, 0.20),
    ),
    # --- issue 41: list item counts
    Case(
        "list_item_count_shift",
        "list-count",
        "FAIL",
        "A' swaps one citation in 20% of outputs (count kept); B drops a citation in 20% and never adds one: the "
        "candidate cites fewer sources, a one-way change the A/A never shows.",
        citations(drop_citation),
    ),
    Case(
        "list_items_swapped_as_in_aa",
        "list-count",
        "PASS",
        "A' and B each swap one citation in 20% of outputs, counts kept: the same noise.",
        citations(swap_citation),
    ),
    # --- issue 41: numeric means
    Case(
        "numeric_mean_shift",
        "mean",
        "FAIL",
        "Scores jitter with sd 0.03 in every run; B's are also 0.04 higher on average: each move is within the noise, "
        "the mean shift is ~30 A/A standard errors (a systematically more confident model).",
        scores(jitter_score(0.03), jitter_score(0.03, shift=0.04)),
    ),
    Case(
        "llm_confidence_jitter",
        "mean",
        "PASS",
        "Scores jitter with sd 0.03 in every output of every run, B alike: an LLM's confidence noise, mean unchanged.",
        scores(jitter_score(0.03), jitter_score(0.03)),
    ),
    # --- issue 49: content audits
    Case(
        "audit_email_of_other_customer",
        "audit-pii",
        "FAIL",
        "1% of B's replies copy in another customer's e-mail address; the baselines never show one: a data leak, "
        "however rare.",
        audit(append(lambda row, rng: f"We have also copied {email(rng)} on this reply."), 0.01),
    ),
    Case(
        "audit_phone_of_other_customer",
        "audit-pii",
        "FAIL",
        "0.5% of 2,000 replies (10) give another customer's phone number; never in the baselines: a data leak.",
        audit(
            append(lambda row, rng: f"For details, call our client {rng.choice(FIRST)} at {phone(rng)}."), 0.005, n=2000
        ),
    ),
    Case(
        "audit_iban_of_other_customer",
        "audit-pii",
        "FAIL",
        "1% of B's replies quote a valid IBAN that is not in the baseline's output for that ticket: another "
        "customer's bank account.",
        audit(append(lambda row, rng: f"The refund goes to IBAN {iban(rng)}."), 0.01),
    ),
    Case(
        "audit_card_number",
        "audit-pii",
        "FAIL",
        "0.5% of 2,000 replies (10) print a Luhn-valid card number; the baselines never: a card leak.",
        audit(append(lambda row, rng: f"The replacement was charged to card {card(rng)}."), 0.005, n=2000),
    ),
    Case(
        "audit_own_phone_repeated",
        "audit-pii",
        "PASS",
        "Every reply repeats the customer's own phone number, and B repeats it once more in 1%: the baseline's own "
        "value for that ticket, not a leak.",
        audit(append(_own_phone_again), 0.01, make=with_own_phone),
    ),
    Case(
        "audit_word_list_insult",
        "audit-words",
        "FAIL",
        "1% of B's replies call the customer an idiot; the baselines never: one insulting reply is one too many. "
        "The team lists the words it never wants to see (the list is empty by default).",
        audit(append(_insult), 0.01),
        config={"audits": {"words": ["idiot"]}},
    ),
    Case(
        "audit_language_switch",
        "audit-language",
        "FAIL",
        "1% of B's replies to English-writing customers are in Spanish; the baselines always answer in English.",
        audit(in_spanish, 0.01, where=approved),
    ),
    Case(
        "audit_language_per_customer",
        "audit-language",
        "PASS",
        "Customers write in English, German, French or Spanish and every run answers each in their own language "
        "(with paraphrase noise): no language change for any ticket.",
        audit(in_spanish, 0.0, make=multilingual),
    ),
    Case(
        "audit_truncated_reply",
        "audit-truncation",
        "FAIL",
        "1% of B's replies stop mid-sentence (no final punctuation); the baselines' never do: a reply cut off.",
        audit(truncate, 0.01),
    ),
    Case(
        "audit_truncated_as_in_aa",
        "audit-truncation",
        "PASS",
        "A' cuts 1% of its replies mid-sentence, B as many: the baseline hits the same limit as often.",
        audit(truncate, 0.01, aa=0.01),
    ),
    Case(
        "audit_empty_summary",
        "audit-empty",
        "FAIL",
        "1% of B's summaries are empty or whitespace; the baselines' never: a customer gets a blank reply.",
        audit(empty, 0.01),
    ),
    # --- shapes of output the cases above do not have (kind "shape"): labelled before they were first run
    Case(
        "shape_enum_case_change",
        "shape",
        "FAIL",
        "B writes every label in capitals (POSITIVE for positive): a consumer that switches on the exact value no "
        "longer matches any of them.",
        every_output(set_field(("label",), str.upper)),
    ),
    Case(
        "shape_string_becomes_list",
        "shape",
        "FAIL",
        "B writes the order number as a one-item list ([\"A-123\"] for \"A-123\") in every output: a schema change.",
        every_output(set_field(("order",), lambda v: [v])),
    ),
    Case(
        "shape_bool_becomes_string",
        "shape",
        "FAIL",
        "B writes escalate as the text 'true' / 'false' instead of a boolean: 'false' is truthy in most consumers.",
        every_output(set_field(("escalate",), lambda v: "true" if v else "false")),
    ),
    Case(
        "shape_list_item_type_change",
        "shape",
        "FAIL",
        "B cites knowledge-base articles by number (17) instead of by id ('kb-17') in every output.",
        every_output(set_field(("citations",), lambda v: [int(c.split("-")[1]) for c in v])),
    ),
    Case(
        "shape_key_order_only",
        "shape",
        "PASS",
        "B writes every output's keys in another order and nothing else: JSON objects are unordered, same content.",
        every_output(shuffle_keys),
    ),
    Case(
        "shape_whitespace_only",
        "shape",
        "PASS",
        "B pads every summary with extra spaces and a final newline; the words are the same: nothing a reader or a "
        "consumer would notice.",
        every_output(pad_whitespace),
    ),
    Case(
        "shape_decision_flip_inside_json_string",
        "shape",
        "FAIL",
        "The baselines agree; B rejects 8% of the approved refunds inside the payload field, a JSON document held "
        "as a string: one-way, the decision a downstream system parses.",
        orders(reject_in_payload, 0.08, where=approved),
    ),
    Case(
        "shape_amount_as_text_doubled",
        "shape",
        "FAIL",
        "B doubles the amount written as text ('120.50' -> '241.00') in 10% of the outputs; the baselines agree.",
        orders(set_field(("amount_text",), lambda v: f"{float(v) * 2:.2f}"), 0.10),
    ),
    Case(
        "shape_date_format_change",
        "shape",
        "FAIL",
        "B writes the creation time day-first without a zone (03/11/2026 04:05) in every output: the same instant, "
        "but a parser of ISO 8601 fails on all of them.",
        orders(day_first_date, 1.0),
    ),
    Case(
        "shape_line_item_decision_flip",
        "shape",
        "FAIL",
        "B rejects one approved line item (an object inside a list) in 8% of the outputs; the baselines agree.",
        orders(reject_one_line, 0.08, where=has_approved_line),
    ),
    Case(
        "shape_deeply_nested_quantity",
        "shape",
        "FAIL",
        "B adds 5 to a quantity five objects deep in the first line item of 10% of the outputs; the baselines "
        "agree.",
        orders(set_field(("lines",), lambda v: [{**v[0], "meta": {"stock": {"bin": {"count": {
            "qty": v[0]["meta"]["stock"]["bin"]["count"]["qty"] + 5}}}}}, *v[1:]]), 0.10),
    ),
    Case(
        "shape_refusal_appended_to_text",
        "shape",
        "FAIL",
        "B appends 'Note: the refund will not be paid out.' to 10% of the summaries, which keep saying approved: "
        "the reply now contradicts itself.",
        lambda rng: scenario(rng, 1000, change=append(lambda row, r: "Note: the refund will not be paid out."),
                             change_frac=0.10),
    ),
    Case(
        "shape_one_way_decisions_above_margin",
        "shape",
        "FAIL",
        "The baselines agree on all 1,000 decisions; B turns 3% of them from approve to reject, all one way: "
        "beyond the default 2-point margin.",
        lambda rng: scenario(rng, 1000, change=flip_decision, change_frac=0.03, where=approved),
    ),
    Case(
        "shape_one_way_decisions_at_a_tighter_margin",
        "shape",
        "FAIL",
        "As above with 2% (20 refunds), which the default margin (abs_threshold 0.02: a change must exceed 2 points) "
        "lets pass; a team gating refunds sets the margin to 1 point, and then it blocks.",
        lambda rng: scenario(rng, 1000, change=flip_decision, change_frac=0.02, where=approved),
        config={"abs_threshold": 0.01},
    ),
]


# ------------------------------------------------------------------------------------------------ runner
@dataclass
class Outcome:
    """The verdicts of one case over its seeds, with the deciding reasons of each."""

    case: Case
    verdicts: list[str]
    reasons: list[list[str]]
    seconds: float

    def wrong(self) -> Counter[str]:
        """How many seeds went wrong, by kind of error."""
        return Counter(k for v in self.verdicts if (k := error_kind(self.case.expected, v)))


def error_kind(expected: str, got: str) -> str | None:
    """``None`` when right, else 'false PASS' / 'false FAIL' / 'wrong INCONCLUSIVE' / 'missed INCONCLUSIVE'."""
    if expected == got:
        return None
    if got == "INCONCLUSIVE":
        return "wrong INCONCLUSIVE"
    if expected == "INCONCLUSIVE":
        return "missed INCONCLUSIVE"
    return "false PASS" if got == "PASS" else "false FAIL"


def run_case(case: Case, seed: int) -> tuple[str, list[str]]:
    """The verdict of ``compare_runs`` (default options unless the case sets some, the case's key) on the case's
    runs for ``seed``, and its fail / inconclusive reasons as ``CODE(fields)``."""
    from airflow_flink_replay.core.compare import CompareConfig, compare_runs

    runs = case.generate(random.Random(f"{case.name}:{seed}"))
    config = CompareConfig(**case.config) if case.config else None
    result = compare_runs(jsonl(runs.baseline), jsonl(runs.candidate), jsonl(runs.baseline_2), key=case.key,
                          config=config)
    reasons = [
        f"{r.code}({', '.join(r.fields[:3])})" if r.fields else r.code
        for r in result.reasons
        if r.severity in ("fail", "inconclusive")
    ]
    return str(result.verdict), reasons


def evaluate(case: Case, seeds: Iterable[int]) -> Outcome:
    started = time.perf_counter()
    verdicts, reasons = [], []
    for seed in seeds:
        verdict, why = run_case(case, seed)
        verdicts.append(verdict)
        reasons.append(why)
    return Outcome(case, verdicts, reasons, time.perf_counter() - started)


def totals(outcomes: list[Outcome]) -> dict[str, int]:
    """Wrong verdicts over all cases and seeds, by kind of error."""
    counts: Counter[str] = Counter()
    for o in outcomes:
        counts.update(o.wrong())
    return {k: counts[k] for k in ("false PASS", "false FAIL", "wrong INCONCLUSIVE", "missed INCONCLUSIVE")}


def print_row(o: Outcome, width: int, explain: bool) -> None:
    """One line per case: expected, the verdict per seed, and what went wrong (with the deciding reasons)."""
    wrong = o.wrong()
    mark = "ok" if not wrong else "WRONG: " + ", ".join(f"{n} {k}" for k, n in wrong.items())
    print(f"{o.case.name:<{width}}  {o.case.kind:<16} {o.case.expected:<12} {' '.join(o.verdicts):<36} {mark}")
    if explain:
        print(f"{'':<{width}}    why: {o.case.why}")
    if wrong or explain:
        for seed_reasons in dict.fromkeys("; ".join(r) or "-" for r in o.reasons):
            print(f"{'':<{width}}    reasons: {seed_reasons[:300]}")
    sys.stdout.flush()


def summary(outcomes: list[Outcome], seconds: float) -> dict[str, Any]:
    """The machine-readable result (``--json``)."""
    return {
        "cases": [
            {
                "name": o.case.name,
                "kind": o.case.kind,
                "expected": o.case.expected,
                "why": o.case.why,
                "verdicts": o.verdicts,
                "reasons": o.reasons,
                "errors": dict(o.wrong()),
                "seconds": round(o.seconds, 2),
            }
            for o in outcomes
        ],
        "totals": totals(outcomes),
        "wrong_cases": [o.case.name for o in outcomes if o.wrong()],
        "runs": sum(len(o.verdicts) for o in outcomes),
        "seconds": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the chosen cases, print the table (or JSON) and return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per case (default 3)")
    parser.add_argument("--case", action="append", default=None, metavar="NAME", help="run only this case (repeatable)")
    parser.add_argument("--explain", action="store_true", help="print why each label is right, and the reasons")
    parser.add_argument("--json", action="store_true", help="print a machine-readable summary instead of the table")
    parser.add_argument("--strict", action="store_true", help="exit 1 on any wrong verdict, INCONCLUSIVE ones too")
    args = parser.parse_args(argv)
    by_name = {c.name: c for c in CASES}
    unknown = [n for n in args.case or [] if n not in by_name]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {', '.join(by_name)}")
    chosen = [by_name[n] for n in args.case] if args.case else CASES
    width = max(len(c.name) for c in chosen)
    if not args.json:
        print(f"{'case':<{width}}  {'kind':<16} {'expected':<12} verdicts per seed")
    started, outcomes = time.perf_counter(), []
    for case in chosen:
        outcomes.append(evaluate(case, range(1, args.seeds + 1)))
        if not args.json:
            print_row(outcomes[-1], width, args.explain)
    seconds = time.perf_counter() - started
    counts = totals(outcomes)
    if args.json:
        print(json.dumps(summary(outcomes, seconds), indent=2, ensure_ascii=False))
    else:
        wrong = [o.case.name for o in outcomes if o.wrong()]
        print(f"\n{len(chosen)} cases x {args.seeds} seeds in {seconds:.1f} s; wrong cases: {len(wrong)}")
        print("  ".join(f"{k}: {n}" for k, n in counts.items()))
    bad = counts["false PASS"] + counts["false FAIL"]
    if args.strict:
        bad += counts["wrong INCONCLUSIVE"] + counts["missed INCONCLUSIVE"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
