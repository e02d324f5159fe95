"""Text analysis for the keyword (BM25) side: one tokenizer for every backend.

Latin-script text is split into words, case-folded, stripped of stopwords and stemmed (Snowball).
CJK text has no spaces, so each run of CJK characters yields its characters and its character bigrams,
the classic recipe that needs no dictionary and holds up on CMRC 2018 (docs/performance.md).
Token ids are hashed (blake2b, 32 bits) so that replicas need no shared vocabulary.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache

import Stemmer

# Lucene's EnglishAnalyzer stopword set (the one Pyserini's BM25 baselines use).
LUCENE_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
STOPWORD_SETS: dict[str, frozenset[str]] = {"none": frozenset(), "lucene": LUCENE_STOPWORDS}

# Words that carry no topic in a question asked in everyday language ("how many days do I need to ...", "can I ...",
# "what is the ..."): interrogatives, auxiliaries and modals, pronouns, filler. Dropped from a keyword query only
# (`Tokenizer.query_tokens`), never from what is indexed, so changing the list needs no re-index.
QUESTION_FILLER = frozenset(
    "how what whats when where which who whom whose why "
    "do does did doing done can could should would shall might must am were been being "
    "have has having had get gets getting got "
    "i me my mine myself we our ours you your yours he him his she her hers them its "
    "someone somebody anyone anybody anything something "
    "need needs want wants wanna please thanks hi hello hey just really actually also still "
    "ok okay much many often soon any some way know tell let".split()
)

# Han (incl. extension A and compatibility ideographs), kana, hangul syllables.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
# A run of CJK characters, or a word: letters and digits that are not CJK (one character class, not a lookahead per
# character). A text without CJK characters (most text) is split by `_WORD_RE` alone, the cheaper pattern.
_TOKEN_RE = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)")
_WORD_RE = re.compile(r"[^\W_]+")
_HAS_CJK = re.compile(rf"[{_CJK}]")


@dataclass(frozen=True)
class TokenizerConfig:
    """How text becomes BM25 terms. Part of the index manifest: changing it needs a re-index.

    Example:
        >>> Tokenizer(TokenizerConfig()).tokens("Refunds for the annual plans")
        ['refund', 'annual', 'plan']
    """

    stemmer: str | None = "english"
    stopwords: str = "lucene"
    cjk_bigrams: bool = True

    def __post_init__(self) -> None:
        if self.stopwords not in STOPWORD_SETS:
            raise ValueError(f"unknown stopword set {self.stopwords!r}; choose one of {sorted(STOPWORD_SETS)}")
        if self.stemmer is not None and self.stemmer not in Stemmer.algorithms():
            raise ValueError(f"unknown stemmer {self.stemmer!r}; choose one of {Stemmer.algorithms()}")


class Tokenizer:
    """Turns text into a list of normalised terms and terms into stable 32-bit ids.

    Example:
        >>> t = Tokenizer(TokenizerConfig())
        >>> t.tokens("退款政策")
        ['退', '款', '政', '策', '退款', '款政', '政策']
    """

    def __init__(self, config: TokenizerConfig) -> None:
        self.config = config
        self._stopwords = STOPWORD_SETS[config.stopwords]
        self._stemmer = Stemmer.Stemmer(config.stemmer) if config.stemmer else None
        self._filler: frozenset[str] | None = None

    def tokens(self, text: str) -> list[str]:
        """Normalise (NFKC, case-fold) and split `text` into terms (a multiset: order carries no meaning)."""
        text = unicodedata.normalize("NFKC", text).casefold()
        if not _HAS_CJK.search(text):
            return self._stems([word for word in _WORD_RE.findall(text) if word not in self._stopwords])
        parts = _TOKEN_RE.findall(text)
        stems = self._stems([word for cjk, word in parts if not cjk and word not in self._stopwords])
        out: list[str] = []
        next_stem = iter(stems).__next__
        for cjk, word in parts:  # in the text's order
            if cjk:
                out.extend(cjk)
                if self.config.cjk_bigrams:
                    out.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
            elif word not in self._stopwords:
                out.append(next_stem())
        return out

    def query_tokens(self, text: str, drop_filler: bool = False) -> list[str]:
        """A query's terms: `tokens`, less the terms of `QUESTION_FILLER` when `drop_filler` (all of them kept when
        nothing else is left, so a question of filler alone still searches).

        Example:
            >>> Tokenizer(TokenizerConfig()).query_tokens("How many days do I need to be in the office?", True)
            ['day', 'offic']
        """
        terms = self.tokens(text)
        if not drop_filler:
            return terms
        filler = self._filler_terms()
        kept = [t for t in terms if t not in filler]
        return kept or terms

    def _filler_terms(self) -> frozenset[str]:
        if self._filler is None:
            self._filler = frozenset(self.tokens(" ".join(sorted(QUESTION_FILLER))))
        return self._filler

    def _stems(self, words: list[str]) -> list[str]:
        return self._stemmer.stemWords(words) if self._stemmer else words  # one call for the text

    def matches(self, text: str, terms: Collection[str]) -> list[tuple[int, int, str]]:
        """Each word, CJK character and CJK character pair of `text` whose term is among `terms`: its start and end
        character offsets and the term, in the text's order (a pair's entry follows its first character's).

        Example:
            >>> t = Tokenizer(TokenizerConfig())
            >>> t.matches("Refunds for the annual plans", t.tokens("refund a plan"))
            [(0, 7, 'refund'), (23, 28, 'plan')]
        """
        wanted = set(terms)
        found: list[tuple[int, int, str]] = []
        for match in _TOKEN_RE.finditer(text):
            cjk, word = match.groups()
            if word:
                end = match.end()
                while end < len(text) and unicodedata.combining(text[end]):  # a decomposed accent ends no word
                    end += 1
                terms_here = sorted(wanted.intersection(self.tokens(text[match.start() : end])))
                found.extend((match.start(), end, term) for term in terms_here)
                continue
            chars = [unicodedata.normalize("NFKC", c).casefold() for c in cjk]
            for i, char in enumerate(chars):
                at = match.start() + i
                if char in wanted:
                    found.append((at, at + 1, char))
                if self.config.cjk_bigrams and i + 1 < len(chars) and char + chars[i + 1] in wanted:
                    found.append((at, at + 2, char + chars[i + 1]))
        return found

    def spans(self, text: str, terms: Collection[str]) -> list[tuple[int, int]]:
        """Where in `text` (start and end character offsets, merged when they touch) the words, CJK characters and
        CJK character pairs are whose terms are among `terms`: what a keyword match on those terms matched.

        Example:
            >>> t = Tokenizer(TokenizerConfig())
            >>> t.spans("Refunds for the annual plans", t.tokens("refund a plan"))
            [(0, 7), (23, 28)]
        """
        merged: list[tuple[int, int]] = []
        for start, end, _ in sorted(self.matches(text, terms)):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged


@lru_cache(maxsize=1 << 18)
def term_id(term: str) -> int:
    """A stable unsigned 32-bit id for `term` (blake2b), the sparse-vector index."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest(), "little")
