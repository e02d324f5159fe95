"""Synthetic day-0 question sets: the pure half (prompts, parsing, quality control, sampling, cases).

The service samples chunks (`stratified_sample`), asks a model for questions only one passage answers
(`generation_messages` → `parse_generation`), drops the ones the rules reject (`rule_rejections`), asks the model
again whether the passage fully answers each survivor (`check_messages` → `parse_check`), embeds them and drops
near-duplicates (`near_duplicates`), and stores the rest as proposed cases (`synthetic_case`): one evidence label
each, `{"doc_id", "evidence"}`, so the case survives re-chunking. Nothing here touches the network.

Words, everywhere below, are `eval.matching.normalize`d tokens: runs of letters and digits, except that each
Han, Hiragana or Katakana character is a token of its own worth half a word (`too_short`, `copied` and
`copy_overlap` count in those units, so eight Chinese characters weigh as much as four English words).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eval.cases import Case, Label
from eval.errors import EvalError
from eval.matching import normalize

PROMPT_VERSION = "synth-v1"  # bump when a prompt below changes: a case's generator records it
MAX_QUESTIONS = 20  # per passage and call

# -- passages --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Passage:
    """One chunk a question is written for. `text` is the chunk's own text, without any title prefix (it may be
    empty while only sampling: `generation_messages` refuses a passage without text).

    Example:
        >>> Passage("billing#0", "billing", "Refunds take 30 days.", title="Billing").doc_id
        'billing'
    """

    chunk_id: str
    doc_id: str
    text: str
    title: str = ""
    heading_path: tuple[str, ...] = ()
    tenant: str | None = None
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.chunk_id or not self.doc_id:
            raise EvalError("a passage needs a chunk_id and a doc_id")

    @property
    def primary_tag(self) -> str:
        """The first tag, or "" without tags."""
        return self.tags[0] if self.tags else ""


@dataclass(frozen=True)
class Draft:
    """A question the model wrote, with evidence that is a span of the passage (`verbatim`: the model's own
    evidence was found there; otherwise the passage's sentence nearest to it stands in)."""

    question: str
    evidence: str
    verbatim: bool


@dataclass(frozen=True)
class Generation:
    """A generation response read: the usable drafts, and how many entries were unusable (not an object,
    question missing or blank; a response without a readable `questions` list counts as one)."""

    drafts: tuple[Draft, ...]
    malformed: int


# -- words -----------------------------------------------------------------------------------------------------

_CJK = "\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_IS_CJK = re.compile(rf"[{_CJK}]")
CJK_WEIGHT = 0.5  # a Han/kana character counts as half a word


def words(text: str) -> list[str]:
    """The normalised tokens of a text: letter/digit runs, and each Han or kana character alone.

    Example:
        >>> words("What's the **Refund** window? 退款")
        ['what', 's', 'the', 'refund', 'window', '退', '款']
    """
    return _TOKEN.findall(normalize(text))


def _weight(token: str) -> float:
    return CJK_WEIGHT if _IS_CJK.fullmatch(token) else 1.0


def word_count(text: str) -> float:
    """Words in a text, a Han or kana character counting as half a word.

    Example:
        >>> word_count("退款需要多少天"), word_count("how long do refunds take")
        (3.5, 5.0)
    """
    return sum(_weight(t) for t in words(text))


# -- language --------------------------------------------------------------------------------------------------

LANGUAGE_NAMES: dict[str, str] = {
    "en": "English",
    "other-latin": "a Latin-script language other than English",
    "zh": "Chinese",
    "ja": "Japanese",
    "ko": "Korean",
    "ru": "Russian (or another Cyrillic-script language)",
    "ar": "Arabic (or another Arabic-script language)",
    "el": "Greek",
    "he": "Hebrew",
    "hi": "Hindi (or another Devanagari-script language)",
    "th": "Thai",
    "und": "an undetermined language",
}
_SCRIPT_LANGUAGE = {
    "CYRILLIC": "ru",
    "ARABIC": "ar",
    "HANGUL": "ko",
    "GREEK": "el",
    "HEBREW": "he",
    "DEVANAGARI": "hi",
    "THAI": "th",
}
_ENGLISH_FUNCTION_WORDS = frozenset(
    "the a an and or of to in on for with is are was were be by it this that from as at not can will".split()
)


def _script(ch: str) -> str:
    name = unicodedata.name(ch, "")
    if name.startswith("CJK") or "IDEOGRAPH" in name:
        return "HAN"
    return name.split(" ", 1)[0]  # LATIN, CYRILLIC, HIRAGANA, KATAKANA, HANGUL, ...


def language_of(text: str) -> str:
    """A language code from the script most of the text's letters are written in (no dictionary, no model).

    Han with any kana (at least 5% of the Han + kana letters) is "ja", Han alone "zh"; Hangul "ko"; Cyrillic
    "ru"; Arabic "ar"; Greek, Hebrew, Devanagari, Thai their languages. Latin is "en" when every letter is ASCII
    or when English function words ("the", "and", "of", ...) are at least 10% of the words, else "other-latin".
    No letters: "und". `LANGUAGE_NAMES` names each code for a prompt.

    Example:
        >>> language_of("Refunds take 30 days."), language_of("退款需要三十天。"), language_of("返金は30日です。")
        ('en', 'zh', 'ja')
        >>> language_of("Die Rückerstattung dauert dreißig Tage.")
        'other-latin'
    """
    text = unicodedata.normalize("NFKC", text)  # full-width Latin is Latin
    counts: dict[str, int] = {}
    for ch in text:
        if ch.isalpha():
            script = _script(ch)
            counts[script] = counts.get(script, 0) + 1
    if not counts:
        return "und"
    kana = counts.get("HIRAGANA", 0) + counts.get("KATAKANA", 0)
    grouped = dict(counts)
    grouped["HAN"] = grouped.get("HAN", 0) + kana  # Japanese is Han and kana together
    grouped.pop("HIRAGANA", None)
    grouped.pop("KATAKANA", None)
    top = max(sorted(grouped), key=lambda s: grouped[s])
    if top == "HAN":
        return "ja" if kana and kana >= 0.05 * grouped["HAN"] else "zh"
    if top in _SCRIPT_LANGUAGE:
        return _SCRIPT_LANGUAGE[top]
    if top != "LATIN":
        return "und"
    if all(ch.isascii() for ch in text if ch.isalpha()):
        return "en"
    tokens = re.findall(r"[^\W\d_]+", text.casefold())
    english = sum(t in _ENGLISH_FUNCTION_WORDS for t in tokens)
    return "en" if tokens and english >= 0.1 * len(tokens) else "other-latin"


# -- prompts ---------------------------------------------------------------------------------------------------

GENERATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "questions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"question": {"type": "string"}, "evidence": {"type": "string"}},
                "required": ["question", "evidence"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["questions"],
    "additionalProperties": False,
}
CHECK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answerable": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["answerable", "reason"],
    "additionalProperties": False,
}

_GENERATION_SYSTEM = """\
You write evaluation questions for a search engine. You are shown one passage of a document collection. Write \
questions that a real user of that collection would ask, and that this passage, and only this passage, answers.

Rules:
- Ask about what is specific to this passage (numbers, conditions, names, steps, exceptions), not general knowledge.
- Write as a user who has not read the passage: use your own words and do not copy phrases from it.
- Never mention the source: no "the passage", "the document", "the text", "this section", "the above", \
"according to ...".
- Each question stands alone: name what it is about. Do not start with, or make the subject, a pronoun that \
points outside the question ("it", "they", "this", "these", "those", "he", "she").
- Do not ask what the title or headings alone answer.
- Write every question in the passage's language ({language}).
- For each question give "evidence": a short span copied exactly, character for character, from the passage \
(a few words up to one sentence) that answers the question.

Answer with JSON only, in this shape: {{"questions": [{{"question": "...", "evidence": "..."}}]}}"""

_CHECK_SYSTEM = """\
You check evaluation questions for a search engine. Given a question and a passage, decide whether the passage \
alone fully answers the question: every part of it, without outside knowledge. A partial, implied or merely \
related answer is not enough.

Answer with JSON only, in this shape: {"answerable": true or false, "reason": "one short sentence"}"""


def _context(passage: Passage) -> str:
    lines = []
    if passage.title.strip():
        lines.append(f"Title: {passage.title.strip()}")
    if passage.heading_path:
        lines.append("Section: " + " > ".join(passage.heading_path))
    lines.append(f"Passage:\n<<<\n{passage.text.strip()}\n>>>")
    return "\n".join(lines)


def generation_messages(passage: Passage, n: int) -> list[dict[str, str]]:
    """The chat messages asking for `n` questions (1..MAX_QUESTIONS) only this passage answers, each with
    verbatim evidence; the reply's shape is `GENERATION_SCHEMA`.

    Example:
        >>> msgs = generation_messages(Passage("b#0", "b", "Annual plans are refundable within 30 days."), 3)
        >>> [m["role"] for m in msgs], "Write 3 questions" in msgs[1]["content"], "(English)" in msgs[0]["content"]
        (['system', 'user'], True, True)
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_QUESTIONS:
        raise EvalError(f"ask for 1 to {MAX_QUESTIONS} questions per passage, got {n!r}")
    if not passage.text.strip():
        raise EvalError(f"passage {passage.chunk_id!r} has no text: load it before asking for questions")
    language = LANGUAGE_NAMES[language_of(passage.text)]
    user = (
        f"{_context(passage)}\n\nWrite {n} question{'s' if n != 1 else ''} in {language}, "
        "each with its evidence copied exactly from the passage."
    )
    return [
        {"role": "system", "content": _GENERATION_SYSTEM.format(language=language)},
        {"role": "user", "content": user},
    ]


def check_messages(question: str, passage: Passage) -> list[dict[str, str]]:
    """The chat messages asking whether the passage fully answers the question; the reply's shape is
    `CHECK_SCHEMA`.

    Example:
        >>> check_messages("How long is the refund window?", Passage("b#0", "b", "30 days."))[1]["content"][:9]
        'Question:'
    """
    if not question.strip():
        raise EvalError("the question to check is empty")
    user = f"Question: {' '.join(question.split())}\n\n{_context(passage)}\n\nDoes the passage fully answer it?"
    return [{"role": "system", "content": _CHECK_SYSTEM}, {"role": "user", "content": user}]


# -- reading the replies ---------------------------------------------------------------------------------------

_QUOTES = "\"'“”‘’«»「」『』"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])|\n+")


def sentences(text: str) -> list[str]:
    """The passage's sentences (and lines), stripped, each a span of the text.

    Example:
        >>> sentences("Refunds take 30 days. Ask support!\\n- Monthly plans: none。没有退款。")
        ['Refunds take 30 days.', 'Ask support!', '- Monthly plans: none。', '没有退款。']
    """
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _verbatim(evidence: str, text: str) -> str | None:
    """The evidence (or it without surrounding quotes, ellipses or a final full stop) when its normalised form is
    in the normalised text."""
    haystack = normalize(text)
    base = evidence.strip()
    unquoted = base.strip(_QUOTES).strip()
    trimmed = unquoted.strip(".…").strip()
    for candidate in (base, unquoted, trimmed, trimmed.rstrip("。.")):
        if normalize(candidate) and normalize(candidate) in haystack:
            return candidate
    return None


def nearest_sentence(probe: str, text: str) -> tuple[str, int]:
    """The text's sentence sharing the most `content_words` with `probe` (the first on a tie), and that count.

    Example:
        >>> nearest_sentence("refund within thirty days", "Plans renew yearly. Refunds: within 30 days.")
        ('Refunds: within 30 days.', 3)
    """
    wanted = content_words(probe)
    best, best_score = "", -1
    for sentence in sentences(text):
        score = len(wanted & content_words(sentence))
        if score > best_score:
            best, best_score = sentence, score
    return best, max(best_score, 0)


def locate_evidence(evidence: str, question: str, text: str) -> tuple[str, bool]:
    """Evidence that is a span of `text` (after `normalize`), and whether it is the model's own.

    The model's evidence when found verbatim (quotes, ellipses or a final full stop it added are dropped);
    otherwise the sentence sharing the most words with the model's evidence, or, when none shares any, with the
    question; when no sentence shares a word with either, the first sentence (for a passage without text, the
    model's evidence, which `synthetic_case` then refuses).

    Example:
        >>> text = "Annual plans are refundable within 30 days. Monthly plans are not."
        >>> locate_evidence('"within 30 days."', "?", text)
        ('within 30 days.', True)
        >>> locate_evidence("monthly subscriptions can't be refunded", "?", text)
        ('Monthly plans are not.', False)
    """
    found = _verbatim(evidence, text) if evidence.strip() else None
    if found is not None:
        return found, True
    sentence, score = nearest_sentence(evidence, text)
    if score == 0:
        sentence, score = nearest_sentence(question, text)
    if score == 0:
        sentence = next(iter(sentences(text)), evidence.strip())  # no text at all: nothing to stand in
    return sentence, False


def read_generation(data: object, passage: Passage) -> Generation:
    """A generation reply (`{"questions": [{"question", "evidence"}]}`) → drafts and a malformed count.

    Tolerant: extra keys are ignored; a JSON string is parsed; a bare list is read as the questions; an entry that
    is not an object or whose question is missing, not a string or blank is skipped and counted as malformed, as
    is a reply without a readable list (one); a missing or blank evidence is replaced by the nearest sentence.

    Example:
        >>> p = Passage("b#0", "b", "Annual plans are refundable within 30 days.")
        >>> g = read_generation({"questions": [{"question": "Refund window?", "evidence": "30 days"}, 7]}, p)
        >>> g.drafts[0].evidence, g.malformed
        ('30 days', 1)
    """
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError:
            return Generation((), 1)
    items = data.get("questions") if isinstance(data, Mapping) else data
    if not isinstance(items, list):
        return Generation((), 1)
    drafts: list[Draft] = []
    malformed = 0
    for item in items:
        question = item.get("question") if isinstance(item, Mapping) else None
        if not isinstance(question, str) or not question.strip():
            malformed += 1
            continue
        raw = item.get("evidence") if isinstance(item, Mapping) else None
        question = " ".join(question.split())
        evidence, verbatim = locate_evidence(raw if isinstance(raw, str) else "", question, passage.text)
        drafts.append(Draft(question, evidence, verbatim))
    return Generation(tuple(drafts), malformed)


def parse_generation(data: object, passage: Passage) -> list[Draft]:
    """The drafts of a generation reply (`read_generation` also counts the malformed entries).

    Example:
        >>> p = Passage("b#0", "b", "Annual plans are refundable within 30 days. Monthly plans are not.")
        >>> parse_generation({"questions": [{"question": "Can a monthly plan be refunded?"}]}, p)
        [Draft(question='Can a monthly plan be refunded?', evidence='Monthly plans are not.', verbatim=False)]
    """
    return list(read_generation(data, passage).drafts)


_YES = {"true", "yes", "y", "1"}
_NO = {"false", "no", "n", "0"}


def parse_check(data: object) -> tuple[bool | None, str]:
    """A check reply (`{"answerable": bool, "reason": str}`) → (answerable, reason); None when unreadable.

    "yes"/"no"/"true"/"false" strings are read too; anything else is None with a reason saying why.

    Example:
        >>> parse_check({"answerable": True, "reason": "states the window"}), parse_check({"answerable": "maybe"})
        ((True, 'states the window'), (None, "unreadable check reply: answerable is 'maybe'"))
    """
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError:
            return None, "unreadable check reply: not JSON"
    if not isinstance(data, Mapping):
        return None, f"unreadable check reply: expected an object, got {type(data).__name__}"
    value = data.get("answerable")
    reason = data.get("reason")
    reason = " ".join(reason.split()) if isinstance(reason, str) else ""
    if reason.casefold() in PLACEHOLDERS:  # the prompt's example echoed: the model judged nothing
        return None, f"unreadable check reply: the reason is the prompt's placeholder {reason!r}"
    if isinstance(value, bool):
        return value, reason
    if isinstance(value, str) and value.strip().casefold() in _YES | _NO:
        return value.strip().casefold() in _YES, reason
    return None, f"unreadable check reply: answerable is {value!r}"


# -- quality control -------------------------------------------------------------------------------------------

TOO_SHORT = "too_short"
PRONOUN_LED = "pronoun_led"
REFERS_TO_SOURCE = "refers_to_source"
TITLE_ONLY = "title_only"
COPIED = "copied"
NOT_A_QUESTION = "not_a_question"
REASONS: dict[str, str] = {
    TOO_SHORT: "too short to be a real question (fewer than min_words words; a Han or kana character is half a word)",
    PRONOUN_LED: 'opens with, or has as its subject, a pronoun with nothing to refer to ("What does it cost?")',
    REFERS_TO_SOURCE: 'mentions the source instead of the topic ("according to the document", "this section")',
    TITLE_ONLY: "answerable from the title and headings alone: every content word of the question is in them",
    COPIED: "copies a long run of words from the passage, which flatters keyword search",
    NOT_A_QUESTION: 'not a question: no question mark and no interrogative opening ("The answer is: 3.")',
}
# what the prompts show as the shape of a reply: a model that echoes them has answered nothing
PLACEHOLDERS = frozenset({"...", "…", "one short sentence"})

PRONOUNS = frozenset("it they this these those he she its their them".split())
_INTERROGATIVES = frozenset("what which who whom whose why how when where".split())
_AUXILIARIES = frozenset(
    "is are was were be been do does did can could should would will shall may might must has have had s".split()
)
_PREPOSITIONS = frozenset("in on for to with at by from of under after before during about into".split())
# words that may precede the subject of a question: interrogatives, auxiliaries, prepositions, quantifiers
_LEAD = _INTERROGATIVES | _AUXILIARIES | _PREPOSITIONS | frozenset("much many long often far old exactly".split())
_SUBJECT_WINDOW = 5  # the first non-lead word is looked for among the first five words
_AUX_WINDOW = 3  # an "<auxiliary> <pronoun>" pair is looked for within three words after the interrogative
_CJK_PRONOUN_START = re.compile("它|他(?!人)|她|这|那些|那个|那种")  # 他人 is "others"

_SOURCE_NOUNS = (
    "document|doc|section|passage|text|excerpt|extract|snippet|chunk|article|page|paragraph|context|source|author"
)
_REFERS_TO_SOURCE = re.compile(
    r"\b(?:"
    rf"(?:this|the given|the provided|the above|the following|that) (?:{_SOURCE_NOUNS})"
    r"|the (?:document|section|passage|text|excerpt)"
    r"|the above"
    rf"|according to (?:this|these|the above|the (?:{_SOURCE_NOUNS}))"
    r"|(?:mentioned|described|stated|listed|shown|discussed) (?:here|above|below)"
    r")\b"
    r"|这段|本段|该段|此段|这篇|本文|文中|上文|原文|该文|文章中"
)


def _pronoun_led(question: str) -> bool:
    """The heuristic behind `pronoun_led`, on the question's words (`words`):

    1. skip the lead, the longest run of interrogatives ("what", "how", ...), auxiliaries ("does", "is", "can", ...),
       prepositions ("for", "in", ...) and quantifiers ("much", "many", "long", ...) at the start; if the next
       word, among the first five, is one of `PRONOUNS`, the question leans on a missing antecedent ("This applies
       to whom?", "What does it cost?", "Why do they require approval?", "How much is their fee?");
    2. or: an auxiliary directly followed by a pronoun sits within the three words after the first word of the
       question, that first word being an interrogative ("What port does it use?", "How many plans do they offer?");
    3. a Chinese question starting with 它, 他 (not 他人), 她, 这 or 那些/那个/那种.

    A pronoun later in the question ("... for annual plans and how is it calculated?") has its antecedent before it
    and is accepted.
    """
    stripped = normalize(question)
    if _CJK_PRONOUN_START.match(stripped):
        return True
    w = words(question)
    i = 0
    while i < len(w) and w[i] in _LEAD:
        i += 1
    if i < min(len(w), _SUBJECT_WINDOW) and w[i] in PRONOUNS:
        return True
    if w and w[0] in _INTERROGATIVES:
        for j in range(1, min(len(w) - 1, 1 + _AUX_WINDOW)):
            if w[j] in _AUXILIARIES and w[j + 1] in PRONOUNS:
                return True
    return False


_STOPWORDS = (
    _INTERROGATIVES
    | _AUXILIARIES
    | _PREPOSITIONS
    | PRONOUNS
    | frozenset(
        "a an the and or not no any some there i we you my our your me us that if than then so also "
        "get much many long often kind type".split()
    )
)
_CJK_STOP_PHRASES = re.compile(
    "什么|怎么|怎样|如何|哪些|哪个|哪里|为什么|多少|是否|有没有|可以|能否|请问|关于|吗|呢|的|是|了|有|在|和|与|吧|么|几"
)


def _stem(word: str) -> str:
    """A plural's singular, roughly: "policies" → "policy", "plans" → "plan", "access" stays."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def content_words(text: str) -> set[str]:
    """The words of a text that carry its topic: stopwords, interrogatives and auxiliaries dropped (for Chinese,
    common question words and particles), a plural "s" dropped, each Han or kana character on its own.

    Example:
        >>> sorted(content_words("What are the refund policies?")), sorted(content_words("什么是退款？"))
        (['policy', 'refund'], ['款', '退'])
    """
    text = _CJK_STOP_PHRASES.sub(" ", normalize(text))
    return {_stem(t) for t in words(text) if t not in _STOPWORDS}


def _title_only(question: str, passage: Passage) -> bool:
    """`title_only`: the question has at least one content word, and every one is among the content words of the
    title and heading path (so the title answers it, whatever the passage says)."""
    title = content_words(" ".join((passage.title, *passage.heading_path)))
    asked = content_words(question)
    return bool(asked) and asked <= title


def longest_copied_run(question: str, passage_text: str) -> float:
    """The longest run of consecutive question words that also appears consecutively in the passage, in words
    (a Han or kana character counting half).

    Example:
        >>> longest_copied_run("when are annual plans refundable within 30 days", "Refundable within 30 days.")
        4.0
    """
    q = words(question)
    p = words(passage_text)
    best = 0.0
    previous = [0.0] * (len(p) + 1)
    for token in q:
        weight = _weight(token)
        current = [0.0] * (len(p) + 1)
        for j, other in enumerate(p, start=1):
            if token == other:
                current[j] = previous[j - 1] + weight
                best = max(best, current[j])
        previous = current
    return best


def copy_overlap(question: str, passage_text: str) -> float:
    """`longest_copied_run` over the question's word count: 0 (nothing copied) to 1 (the whole question is a
    span of the passage). 0 for a question without words.

    Example:
        >>> copy_overlap("refund window for annual plans", "The refund window for annual plans is 30 days.")
        1.0
        >>> copy_overlap("how long can I get money back", "The refund window for annual plans is 30 days.")
        0.0
    """
    total = word_count(question)
    return min(1.0, longest_copied_run(question, passage_text) / total) if total else 0.0


def rule_rejections(question: str, passage: Passage, *, min_words: int = 4, max_copy_run: int = 8) -> list[str]:
    """Every rule the question breaks, as `REASONS` codes in that dict's order; [] when it passes.

    `too_short`: fewer than `min_words` words. `pronoun_led`: see `_pronoun_led`. `refers_to_source`: names the
    source ("this/the document", "the section", "the passage", "the text", "the above", "according to the
    document", "mentioned here", "this page", 这段, 本文, 文中, 上文, 该段 ...). `title_only`: see `_title_only`.
    `copied`: `longest_copied_run` ≥ `max_copy_run` words (Han/kana characters count half, so 16 characters).
    `not_a_question`: see `_asks` (a small model answers, or chats, instead of asking).

    Example:
        >>> p = Passage("b#0", "b", "Annual plans are refundable within 30 days of purchase.", title="Refunds")
        >>> rule_rejections("How long do I have to ask for my money back on a yearly plan?", p)
        []
        >>> rule_rejections("What does it cost?", p), rule_rejections("Refunds?", p)
        (['pronoun_led'], ['too_short', 'title_only'])
    """
    if min_words < 1 or max_copy_run < 1:
        raise EvalError(f"min_words and max_copy_run must be at least 1, got {min_words} and {max_copy_run}")
    out = []
    if word_count(question) < min_words:
        out.append(TOO_SHORT)
    if _pronoun_led(question):
        out.append(PRONOUN_LED)
    if _REFERS_TO_SOURCE.search(normalize(question)):
        out.append(REFERS_TO_SOURCE)
    if _title_only(question, passage):
        out.append(TITLE_ONLY)
    if longest_copied_run(question, passage.text) >= max_copy_run:
        out.append(COPIED)
    if not _asks(question):
        out.append(NOT_A_QUESTION)
    return out


_QUESTION_MARKS = ("?", "？", "؟", ";")  # Greek writes its question mark as a semicolon
_CJK_ASKING = re.compile("什么|什麼|吗|嗎|哪|谁|誰|怎|为何|為何|为什么|為什麼|几|幾|多少|是否|呢|か")


def _asks(question: str) -> bool:
    """Whether `question` is one: it ends with a question mark, opens with an interrogative or an auxiliary
    ("What ...", "Does ..."), or, in Chinese or Japanese, holds an interrogative word (吗, 什么, 哪, か ...).

    Example:
        >>> _asks("How long is the refund window?"), _asks("Does VPN need MFA"), _asks("The answer is: 3.")
        (True, True, False)
    """
    stripped = question.strip()
    if stripped.endswith(_QUESTION_MARKS):
        return True
    first = next(iter(words(stripped.casefold())), "")
    return first in _INTERROGATIVES or first in _AUXILIARIES or bool(_CJK_ASKING.search(stripped))


BUCKETS = ((0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.0))


def _bucket_name(low: float, high: float) -> str:
    return f"[{low:.1f},{high:.1f}" + ("]" if high == 1.0 else ")")


def _nearest_rank(ordered: Sequence[float], percent: int) -> float:
    return ordered[max(0, math.ceil(len(ordered) * percent / 100) - 1)]


def overlap_distribution(values: Iterable[float]) -> dict[str, Any]:
    """count, mean, p50, p90 (nearest rank: the smallest value at least that share of values is ≤), max, and a
    histogram over [0,0.2), [0.2,0.4), [0.4,0.6), [0.6,0.8), [0.8,1.0] of `copy_overlap` values. Without values the
    statistics are None and the buckets 0.

    Example:
        >>> d = overlap_distribution([0.125, 0.25, 0.375, 1.0])
        >>> d["count"], d["mean"], d["p50"], d["p90"], d["max"]
        (4, 0.4375, 0.25, 1.0, 1.0)
        >>> d["histogram"]
        {'[0.0,0.2)': 1, '[0.2,0.4)': 2, '[0.4,0.6)': 0, '[0.6,0.8)': 0, '[0.8,1.0]': 1}
    """
    ordered = sorted(float(v) for v in values)
    for v in ordered:
        if not 0.0 <= v <= 1.0:  # also NaN
            raise EvalError(f"an overlap is between 0 and 1, got {v!r}")
    histogram = {_bucket_name(lo, hi): 0 for lo, hi in BUCKETS}
    for v in ordered:
        lo, hi = next(b for b in BUCKETS if v < b[1] or b[1] == 1.0)
        histogram[_bucket_name(lo, hi)] += 1
    if not ordered:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "max": None, "histogram": histogram}
    return {
        "count": len(ordered),
        "mean": sum(ordered) / len(ordered),
        "p50": _nearest_rank(ordered, 50),
        "p90": _nearest_rank(ordered, 90),
        "max": ordered[-1],
        "histogram": histogram,
    }


def near_duplicates(vectors: np.ndarray, threshold: float = 0.92) -> list[int]:
    """Row indices to drop, ascending: walking the rows in order, a row whose cosine similarity to a row already
    kept is ≥ `threshold` is dropped, so each group keeps its first. Rows need not be unit length; an all-zero
    row is similar to nothing.

    Example:
        >>> near_duplicates(np.array([[1.0, 0.0], [0.0, 1.0], [0.99, 0.05], [2.0, 0.0]]))
        [2, 3]
    """
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.ndim != 2:
        raise EvalError(f"vectors must be a 2-D array (one row per question), got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise EvalError("vectors hold NaN or infinite values: embed the questions again")
    if not -1.0 <= threshold <= 1.0:
        raise EvalError(f"threshold is a cosine similarity, between -1 and 1, got {threshold!r}")
    norms = np.linalg.norm(matrix, axis=1)
    unit = np.divide(matrix, norms[:, None], out=np.zeros_like(matrix), where=norms[:, None] > 0)
    kept: list[int] = []
    dropped: list[int] = []
    for i in range(len(unit)):
        if norms[i] > 0 and kept and float(np.max(unit[kept] @ unit[i])) >= threshold:
            dropped.append(i)
        else:
            kept.append(i)
    return dropped


# -- sampling --------------------------------------------------------------------------------------------------


def _stratum(passage: Passage) -> tuple[bool, str, str]:
    return (passage.tenant is None, passage.tenant or "", passage.primary_tag)


def _spread(passages: Sequence[Passage], rng: random.Random) -> Iterator[Passage]:
    """One stratum's passages, round robin over its documents in a seeded order, each document's chunks in a
    seeded order: one long document cannot crowd out the others."""
    by_doc: dict[str, list[Passage]] = {}
    for p in sorted(passages, key=lambda p: p.chunk_id):
        by_doc.setdefault(p.doc_id, []).append(p)
    docs = sorted(by_doc)
    rng.shuffle(docs)
    for chunks in by_doc.values():
        rng.shuffle(chunks)
    queues = [iter(by_doc[d]) for d in docs]
    while queues:
        alive = []
        for queue in queues:
            item = next(queue, None)
            if item is not None:
                alive.append(queue)
                yield item
        queues = alive


def stratified_sample(passages: Sequence[Passage], n: int, seed: int) -> list[Passage]:
    """`min(n, len(passages))` passages, the same for the same passages (in any order) and seed.

    Strata are (tenant, primary tag); they take turns in a seeded order, one passage each per round, so `n` is
    shared as evenly as they allow (a stratum that runs out leaves its turns to the others) and every stratum is
    represented once `n` reaches their number. Within a stratum the turns go round robin over its documents in a
    seeded order, a seeded chunk of each. `n ≥ len(passages)` returns them all, in that seeded order.

    Example:
        >>> ps = [Passage(f"{d}#{i}", d, "text", tags=(t,)) for d, t in [("a", "x"), ("b", "y")] for i in range(3)]
        >>> sorted(p.primary_tag for p in stratified_sample(ps, 4, seed=7))
        ['x', 'x', 'y', 'y']
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise EvalError(f"n must be a whole number >= 0, got {n!r}")
    ids = [p.chunk_id for p in passages]
    if len(set(ids)) != len(ids):
        raise EvalError("passages repeat a chunk_id: sample from distinct chunks")
    rng = random.Random(seed)
    strata: dict[tuple[bool, str, str], list[Passage]] = {}
    for p in passages:
        strata.setdefault(_stratum(p), []).append(p)
    keys = sorted(strata)
    rng.shuffle(keys)
    queues = [_spread(strata[k], rng) for k in keys]
    out: list[Passage] = []
    while queues and len(out) < n:
        alive = []
        for queue in queues:
            if len(out) >= n:
                break
            item = next(queue, None)
            if item is not None:
                out.append(item)
                alive.append(queue)
        else:
            queues = alive
    return out


# -- cases -----------------------------------------------------------------------------------------------------


def case_id_for(passage: Passage, question: str) -> str:
    """A stable case id: "syn-" and 12 hex digits of SHA-256 over the chunk id, a newline and the normalised
    question (so spacing and case do not make a new id).

    Example:
        >>> p = Passage("b#0", "b", "text")
        >>> case_id_for(p, "Refund window?") == case_id_for(p, "refund  WINDOW?"), case_id_for(p, "x")[:4]
        (True, 'syn-')
    """
    digest = hashlib.sha256(f"{passage.chunk_id}\n{normalize(question)}".encode()).hexdigest()
    return "syn-" + digest[:12]


def default_category(passage: Passage) -> str:
    """The passage's first (outermost) heading, else its primary tag, else "synthetic".

    Example:
        >>> default_category(Passage("b#0", "b", "t", heading_path=("Billing", "Refunds"), tags=("faq",)))
        'Billing'
    """
    for candidate in (*passage.heading_path[:1], passage.primary_tag):
        if candidate.strip():
            return candidate.strip()
    return "synthetic"


def synthetic_case(
    draft: Draft,
    passage: Passage,
    *,
    case_id: str,
    model: str,
    category: str | None = None,
    created_at: str | None = None,
) -> Case:
    """A proposed case: the question, one evidence label `{"doc_id", "evidence"}` (it survives re-chunking),
    source "synthetic", generator `{"model", "prompt_version"}`, category `default_category` unless given, and
    filters `{"tenant": ...}` when the passage has a tenant. Raises EvalError unless the evidence is in the
    passage's own text after `normalize` (the label must be satisfiable by the chunk it was written for).

    Example:
        >>> p = Passage("b#0", "b", "Annual plans are refundable within 30 days.", tenant="acme")
        >>> c = synthetic_case(Draft("Yearly refund window?", "30 days", True), p, case_id="syn-1", model="m")
        >>> c.relevant[0].to_json(), c.filters, c.generator["prompt_version"]
        ({'doc_id': 'b', 'evidence': '30 days'}, {'tenant': 'acme'}, 'synth-v1')
    """
    evidence = draft.evidence.strip()
    if not normalize(evidence) or normalize(evidence) not in normalize(passage.text):
        raise EvalError(
            f"evidence {draft.evidence!r} is not in passage {passage.chunk_id!r}: locate it first "
            "(locate_evidence / parse_generation)"
        )
    if not model.strip():
        raise EvalError("model is empty: name the model that wrote the question")
    return Case(
        id=case_id,
        question=" ".join(draft.question.split()),
        relevant=(Label(doc_id=passage.doc_id, evidence=evidence),),
        category=category if category and category.strip() else default_category(passage),
        source="synthetic",
        filters={"tenant": passage.tenant} if passage.tenant is not None else {},
        created_at=created_at,
        generator={"model": model, "prompt_version": PROMPT_VERSION},
    )
