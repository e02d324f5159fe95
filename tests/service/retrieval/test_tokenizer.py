from __future__ import annotations

import unicodedata

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from service.retrieval.tokenizer import _HAS_CJK, Tokenizer, TokenizerConfig, term_id


@pytest.fixture
def tok() -> Tokenizer:
    return Tokenizer(TokenizerConfig())


def test_english_is_case_folded_stemmed_and_stopworded(tok: Tokenizer) -> None:
    assert tok.tokens("The Refunds for the ANNUAL plans are processed") == ["refund", "annual", "plan", "process"]


def test_codes_split_into_their_parts(tok: Tokenizer) -> None:
    assert tok.tokens("Error LRK-4012 on SKU LA-PRO-ANN") == ["error", "lrk", "4012", "sku", "la", "pro", "ann"]


def test_unicode_is_normalised(tok: Tokenizer) -> None:
    # full-width letters and digits (NFKC) and German sharp s (case-folding) match their plain forms
    assert tok.tokens("ＬＲＫ－４０１２") == tok.tokens("lrk-4012")
    assert tok.tokens("STRASSE") == tok.tokens("straße")


def test_chinese_yields_characters_and_bigrams(tok: Tokenizer) -> None:
    assert sorted(tok.tokens("退款政策")) == sorted(["退", "款", "政", "策", "退款", "款政", "政策"])


def test_chinese_query_shares_bigrams_with_the_passage_that_answers_it(tok: Tokenizer) -> None:
    passage = set(tok.tokens("年度计划的退款期限为三十天。"))
    query = set(tok.tokens("年度计划退款期限是多久"))
    assert {"退款", "期限", "年度"} <= passage & query


def test_mixed_scripts(tok: Tokenizer) -> None:
    assert tok.tokens("VPN错误LC-419") == ["vpn", "错", "误", "错误", "lc", "419"]


def test_without_bigrams_or_stemming() -> None:
    plain = Tokenizer(TokenizerConfig(stemmer=None, stopwords="none", cjk_bigrams=False))
    assert plain.tokens("The refunds 退款") == ["the", "refunds", "退", "款"]


def test_unknown_stemmer_or_stopwords_are_rejected() -> None:
    with pytest.raises(ValueError, match="stemmer"):
        TokenizerConfig(stemmer="klingon")
    with pytest.raises(ValueError, match="stopword"):
        TokenizerConfig(stopwords="everything")


def test_term_ids_are_stable_unsigned_32_bit() -> None:
    assert term_id("refund") == term_id("refund")
    assert term_id("refund") != term_id("refunds")
    assert all(0 <= term_id(t) < 2**32 for t in ["a", "退款", "lrk"])
    # hashed, not a vocabulary: the same id on every replica and after every restart
    assert term_id("refund") == 842260292  # blake2b-32 of "refund", little-endian


def _marked(tok: Tokenizer, text: str, query: str) -> list[str]:
    return [text[start:end] for start, end in tok.spans(text, tok.tokens(query))]


def test_spans_mark_what_the_keyword_side_matches(tok: Tokenizer) -> None:
    text = "Refunds: annual plans are refunded within 30 days. The plan owner asks."
    assert _marked(tok, text, "how are annual plan refunds handled") == [
        "Refunds",
        "annual",
        "plans",
        "refunded",
        "plan",
    ]
    assert _marked(tok, text, "the and of") == []  # stopwords match nothing
    assert _marked(tok, "ＬＣ－４１９ session", "lc 419") == ["ＬＣ", "４１９"]  # offsets into the text as written


def test_spans_in_chinese_mark_shared_characters_and_pairs(tok: Tokenizer) -> None:
    text = "年度方案的退款政策很简单"
    assert _marked(tok, text, "退款政策") == ["退款政策"]
    assert _marked(tok, text, "政") == ["政"]
    assert tok.spans(text, []) == []


def test_halfwidth_katakana_counts_as_cjk_once_normalised(tok: Tokenizer) -> None:
    assert tok.tokens("ｶﾀ refunds") == ["カ", "タ", "カタ", "refund"]  # in the text's order


def test_spans_cover_a_decomposed_accent(tok: Tokenizer) -> None:
    text = "Cafe\u0301 menu"  # é as e + a combining acute: tokens() composes it first
    assert _marked(tok, text, "café") == ["Cafe\u0301"]


@settings(max_examples=300, derandomize=True, database=None)
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=80))
def test_text_without_cjk_gives_the_terms_the_cjk_path_gives(text: str) -> None:
    # text without CJK characters (after normalisation) takes a faster path than text with them; both must agree
    tok = Tokenizer(TokenizerConfig())
    assume(not _HAS_CJK.search(unicodedata.normalize("NFKC", text).casefold()))
    assert tok.tokens(text + " 中") == [*tok.tokens(text), "中"]


def test_a_questions_filler_is_dropped_from_the_query_only_when_asked(tok: Tokenizer) -> None:
    question = "How many days do I need to be in the office?"
    assert tok.query_tokens(question, drop_filler=True) == ["day", "offic"]
    assert tok.query_tokens(question) == tok.tokens(question) == ["how", "mani", "day", "do", "i", "need", "offic"]
    # what is indexed keeps every word: the filler list is the query's alone
    assert "need" in tok.tokens("a business need")


def test_a_question_of_filler_alone_keeps_its_terms(tok: Tokenizer) -> None:
    assert tok.query_tokens("how do I?", drop_filler=True) == tok.tokens("how do I?") == ["how", "do", "i"]


def test_filler_keeps_words_that_can_name_a_topic(tok: Tokenizer) -> None:
    # "US" (the country) and "May" (the month) are not filler; "long" asks a duration the answer may name
    assert tok.query_tokens("US sales tax in May, how long?", drop_filler=True) == ["us", "sale", "tax", "may", "long"]
