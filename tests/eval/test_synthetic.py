"""Synthetic question sets, the pure half: prompts, reading replies, quality rules, near-duplicates, sampling, cases."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.cases import case_from_json, dump_jsonl, parse_jsonl
from eval.errors import EvalError
from eval.matching import Retrieved, judge, normalize
from eval.synthetic import (
    CHECK_SCHEMA,
    COPIED,
    GENERATION_SCHEMA,
    LANGUAGE_NAMES,
    NOT_A_QUESTION,
    PROMPT_VERSION,
    PRONOUN_LED,
    REASONS,
    REFERS_TO_SOURCE,
    TITLE_ONLY,
    TOO_SHORT,
    Draft,
    Passage,
    case_id_for,
    check_messages,
    copy_overlap,
    generation_messages,
    language_of,
    near_duplicates,
    overlap_distribution,
    parse_check,
    parse_generation,
    read_generation,
    rule_rejections,
    stratified_sample,
    synthetic_case,
)

TEXT = (
    "Annual plans are refundable within 30 days of purchase. Monthly plans are not refundable, "
    "but a cancelled monthly plan stays active until the end of its billing period. "
    "Refunds are paid to the original payment method within five business days."
)
PASSAGE = Passage(
    "billing/refunds#2",
    "billing/refunds",
    TEXT,
    title="Refund policy",
    heading_path=("Billing", "Refunds"),
    tenant="acme",
    tags=("faq", "billing"),
)
ZH_TEXT = "年度订阅计划在购买后三十天内可以申请全额退款。月度订阅计划不支持退款，但取消后在当前计费周期结束前仍然有效。"
ZH_PASSAGE = Passage("zh/refunds#0", "zh/refunds", ZH_TEXT, title="退款政策", heading_path=("账单",))


def codes(question: str, passage: Passage = PASSAGE, **kwargs: int) -> list[str]:
    return rule_rejections(question, passage, **kwargs)


def test_a_good_question_breaks_no_rule() -> None:
    assert codes("How long do I have to ask for my money back on a yearly subscription?") == []
    assert codes("年度订阅在购买多久之内能够拿回全部费用？", ZH_PASSAGE) == []


def test_reasons_name_every_rule_in_the_order_they_are_reported() -> None:
    assert list(REASONS) == [TOO_SHORT, PRONOUN_LED, REFERS_TO_SOURCE, TITLE_ONLY, COPIED, NOT_A_QUESTION]
    assert all(REASONS[code].strip() for code in REASONS)
    # one question breaking three rules reports them in that order
    assert codes("What does this section say?") == [PRONOUN_LED, REFERS_TO_SOURCE]
    assert codes("Its refunds?") == [TOO_SHORT, PRONOUN_LED, TITLE_ONLY]


# -- not_a_question ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        "The answer is: 3. The desk replaces the screen every four years.",
        "Refund rules for yearly subscriptions",
        "年度订阅的退款规则",
    ],
)
def test_not_a_question(question: str) -> None:
    assert NOT_A_QUESTION in codes(question, ZH_PASSAGE if re.search("[一-鿿]", question) else PASSAGE)


@pytest.mark.parametrize(
    "question",
    ["Does a yearly subscription come with a money-back period", "年度订阅可以退款吗", "How long is the window?"],
)
def test_a_question_without_a_mark_or_with_one_is_a_question(question: str) -> None:
    assert NOT_A_QUESTION not in codes(question, ZH_PASSAGE if re.search("[一-鿿]", question) else PASSAGE)


def test_a_check_that_echoes_the_prompt_placeholder_is_unreadable() -> None:
    assert parse_check({"answerable": True, "reason": "one short sentence"})[0] is None
    assert parse_check({"answerable": True, "reason": "the passage gives 30 days"})[0] is True


# -- too_short ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("question", ["Refund window?", "Yearly refund timing?", "退款多久？", "年度退款期限"])
def test_too_short(question: str) -> None:
    assert TOO_SHORT in codes(question, ZH_PASSAGE if re.search("[一-鿿]", question) else PASSAGE)


@pytest.mark.parametrize(
    "question",
    [
        "How long is the yearly money-back period?",
        "Yearly money back timing, how long?",
        "年度计划退款期限",  # eight characters: four words
        "年度计划的退款期限是多久？",
    ],
)
def test_not_too_short(question: str) -> None:
    assert TOO_SHORT not in codes(question, ZH_PASSAGE if re.search("[一-鿿]", question) else PASSAGE)


def test_min_words_is_honoured() -> None:
    assert TOO_SHORT in codes("How long is the yearly money-back period?", min_words=10)
    with pytest.raises(EvalError):
        codes("How long is the yearly money-back period?", min_words=0)


# -- pronoun_led -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        "What does it cost per month?",
        "Why do they require approval?",
        "This applies to whom?",
        "These are paid back within how many days?",
        "How much is their monthly fee?",
        "What's its refund window?",
        "When can he request a refund for a yearly subscription?",
        "For whom is it available after cancellation?",
        "What port does it listen on?",  # an auxiliary + pronoun right after the interrogative's phrase
        "How many regions do they support?",
        "Which of these plans can be refunded?",
        "它的价格是多少？",
        "这个功能需要额外付费吗？",
        "他们需要多久才能收到退款？",
    ],
)
def test_pronoun_led(question: str) -> None:
    assert PRONOUN_LED in codes(question)


@pytest.mark.parametrize(
    "question",
    [
        "What is the refund window for annual plans and how is it calculated?",  # antecedent before "it"
        "If a yearly upload fails, does it retry automatically?",
        "Is there a limit on API keys per tenant?",
        "Which theme does the dashboard use by default?",  # "theme" is not "the"/"them"
        "How long do cancelled monthly subscriptions stay active?",
        "When do annual subscribers get their money back?",  # "their" has "annual subscribers" before it
        "他人能否查看我的账单记录？",  # 他人: "others"
        "年度计划的退款期限是多少天？",
    ],
)
def test_not_pronoun_led(question: str) -> None:
    assert PRONOUN_LED not in codes(question)


# -- refers_to_source --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    [
        "What does the document say about yearly subscriptions?",
        "According to the passage, how long is the yearly money-back window?",
        "According to this, how long is the yearly money-back window?",
        "Which limits does this section list for cancellations?",
        "What does the text say about payment methods?",
        "What is mentioned here about cancelled subscriptions?",
        "What payment method is described above for money back?",
        "What does this page say about payment timing?",
        "Based on the above, can monthly subscribers get money back?",
        "Which options does this article give cancelled subscribers?",
        "这段文字中年度订阅的退款期限是多久？",
        "本文提到的退款到账时间是多少天？",
        "根据上文，月度订阅可以申请退款吗？",
        "文中说取消后的订阅何时失效？",
        "该段落规定的退款方式是什么？",
    ],
)
def test_refers_to_source(question: str) -> None:
    assert REFERS_TO_SOURCE in codes(question)


@pytest.mark.parametrize(
    "question",
    [
        "How long is the money-back window for yearly subscriptions?",
        "According to GDPR, how long may access logs be kept?",  # "according to" a topic, not the source
        "What is the context window of the embedding model?",
        "How do I export text messages from the archive?",
        "年度订阅计划的退款期限是多少天？",
    ],
)
def test_does_not_refer_to_source(question: str) -> None:
    assert REFERS_TO_SOURCE not in codes(question)


# -- title_only --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "question",
    ["What is the refund policy?", "What are the refund policies for billing?", "Is there a billing refund policy?"],
)
def test_title_only(question: str) -> None:
    assert TITLE_ONLY in codes(question)


def test_title_only_in_chinese() -> None:
    assert TITLE_ONLY in codes("什么是退款政策？", ZH_PASSAGE)
    assert TITLE_ONLY not in codes("退款政策的期限是多少天？", ZH_PASSAGE)


@pytest.mark.parametrize(
    "question",
    [
        "How many days do annual subscribers have to request a refund?",
        "Which payment method receives a refund?",
        "What is it?",  # no content word at all: other rules' business
    ],
)
def test_not_title_only(question: str) -> None:
    assert TITLE_ONLY not in codes(question)


def test_title_only_needs_a_title_or_heading() -> None:
    bare = Passage("x#0", "x", TEXT)
    assert TITLE_ONLY not in codes("What is the refund policy?", bare)


# -- copied ------------------------------------------------------------------------------------------------------


def test_copied_at_max_copy_run_words() -> None:
    eight = "So monthly plans are not refundable, but a cancelled one works?"  # an 8-word run
    seven = "So monthly plans are not refundable, but a paused one works?"  # 7 words
    assert COPIED in codes(eight)
    assert COPIED not in codes(seven)
    assert COPIED in codes(seven, max_copy_run=7)


def test_copied_ignores_case_and_punctuation() -> None:
    assert COPIED in codes("ANNUAL plans ARE refundable -- within 30 days OF purchase, right?")


def test_copied_counts_chinese_characters_as_half_words() -> None:
    sixteen = ZH_TEXT[:16]  # 年度订阅计划在购买后三十天内可以
    assert COPIED in codes(sixteen + "吗？", ZH_PASSAGE)
    assert COPIED not in codes(ZH_TEXT[:15] + "吗？", ZH_PASSAGE)


def test_copy_overlap() -> None:
    assert copy_overlap("annual plans are refundable", TEXT) == 1.0
    assert copy_overlap("how soon can I receive my cash", TEXT) == 0.0
    assert copy_overlap("annual plans are refundable how long exactly then", TEXT) == 0.5
    assert copy_overlap("  ", TEXT) == 0.0
    assert copy_overlap(ZH_TEXT[:4] + "多少天", ZH_TEXT) == pytest.approx(4 / 7)


@given(st.text(max_size=60), st.text(max_size=200))
def test_copy_overlap_is_a_share(question: str, passage: str) -> None:
    assert 0.0 <= copy_overlap(question, passage) <= 1.0


# -- overlap distribution ----------------------------------------------------------------------------------------


def test_overlap_distribution_buckets_include_the_lower_bound() -> None:
    d = overlap_distribution([0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 0.999])
    assert d["histogram"] == {"[0.0,0.2)": 1, "[0.2,0.4)": 1, "[0.4,0.6)": 1, "[0.6,0.8)": 1, "[0.8,1.0]": 3}
    assert sum(d["histogram"].values()) == d["count"] == 7


def test_overlap_distribution_statistics() -> None:
    values = [i / 10 for i in range(10)]
    random.Random(3).shuffle(values)
    d = overlap_distribution(values)
    assert d["mean"] == pytest.approx(0.45)
    assert d["p50"] == 4 / 10  # nearest rank: the 5th of 10
    assert d["p90"] == 8 / 10  # the 9th of 10
    assert d["max"] == 9 / 10


def test_overlap_distribution_without_values() -> None:
    d = overlap_distribution([])
    assert d["count"] == 0
    assert d["mean"] is d["p50"] is d["p90"] is d["max"] is None
    assert set(d["histogram"].values()) == {0}


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_overlap_distribution_rejects_values_outside_0_1(bad: float) -> None:
    with pytest.raises(EvalError):
        overlap_distribution([0.5, bad])


# -- near duplicates ---------------------------------------------------------------------------------------------


def test_near_duplicates_keep_the_first_of_each_group() -> None:
    vectors = np.array(
        [
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.99, 0.1, 0.0],  # ~ row 0
            [0.0, 5.0, 0.1],  # ~ row 1, not unit length
            [0.0, 0.0, 1.0],
            [0.0, 0.0, 0.0],  # zero: like nothing
            [0.0, 0.0, 0.0],
        ]
    )
    assert near_duplicates(vectors) == [2, 3]
    assert near_duplicates(vectors[::-1]) == [5, 6]  # reversed: the later of each pair goes


def test_near_duplicates_threshold_is_inclusive() -> None:
    vectors = np.array([[1.0, 0.0], [3.0, 4.0]])  # cosine exactly 0.6
    assert near_duplicates(vectors, threshold=0.6) == [1]
    assert near_duplicates(vectors, threshold=0.61) == []


def test_near_duplicates_compare_with_kept_rows_only() -> None:
    angle = np.deg2rad(15)  # cos 15° ≈ 0.966, cos 30° ≈ 0.866
    vectors = np.array([[1.0, 0.0], [np.cos(angle), np.sin(angle)], [np.cos(2 * angle), np.sin(2 * angle)]])
    assert near_duplicates(vectors, threshold=0.92) == [1]  # row 2 is near row 1, but row 1 was dropped


def test_near_duplicates_edge_cases() -> None:
    assert near_duplicates(np.zeros((0, 4))) == []
    with pytest.raises(EvalError):
        near_duplicates(np.ones(4))
    with pytest.raises(EvalError):
        near_duplicates(np.array([[1.0, np.nan]]))
    with pytest.raises(EvalError):
        near_duplicates(np.eye(2), threshold=1.5)


@settings(max_examples=50)
@given(st.integers(1, 30), st.integers(2, 6), st.integers(0, 2**32 - 1), st.floats(0.5, 0.99))
def test_near_duplicates_properties(n: int, d: int, seed: int, threshold: float) -> None:
    vectors = np.random.default_rng(seed).normal(size=(n, d))
    dropped = near_duplicates(vectors, threshold)
    assert dropped == near_duplicates(vectors.copy(), threshold)
    kept = [i for i in range(n) if i not in set(dropped)]
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = unit @ unit.T
    for a in kept:
        for b in kept:
            assert a == b or sims[a, b] < threshold
    for i in dropped:
        assert any(k < i and sims[k, i] >= threshold for k in kept)


# -- language ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (TEXT, "en"),
        ("Contact José Müller about the refund and the terms of the annual plan.", "en"),
        (ZH_TEXT, "zh"),
        ("年間プランは購入後30日以内に返金できます。", "ja"),
        ("연간 요금제는 구매 후 30일 이내에 환불됩니다.", "ko"),
        ("Годовые планы можно вернуть в течение 30 дней.", "ru"),
        ("يمكن استرداد الخطط السنوية خلال 30 يومًا.", "ar"),
        ("Les forfaits annuels sont remboursables sous trente jours après l'achat.", "other-latin"),
        ("Die Rückerstattung dauert dreißig Tage.", "other-latin"),
        ("１２３ ！！", "und"),
        ("ＲＥＦＵＮＤＳ", "en"),  # full-width Latin
    ],
)
def test_language_of(text: str, code: str) -> None:
    assert language_of(text) == code
    assert code in LANGUAGE_NAMES


# -- prompts -----------------------------------------------------------------------------------------------------


def test_generation_messages() -> None:
    messages = generation_messages(PASSAGE, 3)
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert TEXT in user
    assert "Refund policy" in user
    assert "Billing > Refunds" in user
    assert "Write 3 questions in English" in user
    for rule in ("evidence", "the passage", "copy", "only this passage"):
        assert rule in system


def test_generation_messages_name_the_passages_language() -> None:
    messages = generation_messages(ZH_PASSAGE, 1)
    assert "Chinese" in messages[0]["content"]
    assert "Write 1 question in Chinese" in messages[1]["content"]


@pytest.mark.parametrize("n", [0, -1, 21, True])
def test_generation_messages_reject_bad_counts(n: int) -> None:
    with pytest.raises(EvalError):
        generation_messages(PASSAGE, n)


def test_schemas() -> None:
    item = GENERATION_SCHEMA["properties"]["questions"]["items"]
    assert set(item["required"]) == {"question", "evidence"}
    assert set(CHECK_SCHEMA["required"]) == {"answerable", "reason"}
    json.dumps([GENERATION_SCHEMA, CHECK_SCHEMA])


def test_check_messages() -> None:
    messages = check_messages("  How long is the\nyearly refund window? ", PASSAGE)
    assert "How long is the yearly refund window?" in messages[1]["content"]
    assert TEXT in messages[1]["content"]
    assert "fully" in messages[0]["content"]
    with pytest.raises(EvalError):
        check_messages(" ", PASSAGE)


# -- reading replies ---------------------------------------------------------------------------------------------


def test_parse_generation_keeps_verbatim_evidence() -> None:
    reply = {"questions": [{"question": " How long\nis the yearly window? ", "evidence": "within 30 days"}]}
    assert parse_generation(reply, PASSAGE) == [Draft("How long is the yearly window?", "within 30 days", True)]


def test_evidence_is_verbatim_after_normalisation() -> None:
    passage = Passage("p#0", "p", "Annual plans get a **full   refund** within 30 days.")
    reply = {"questions": [{"question": "What do yearly subscribers get back?", "evidence": '"FULL refund."'}]}
    (draft,) = parse_generation(reply, passage)
    assert draft.verbatim
    assert normalize(draft.evidence) in normalize(passage.text)


def test_evidence_not_in_the_passage_becomes_the_nearest_sentence() -> None:
    reply = {"questions": [{"question": "Where does the money go?", "evidence": "refunds go to the original card"}]}
    (draft,) = parse_generation(reply, PASSAGE)
    assert not draft.verbatim
    assert draft.evidence == "Refunds are paid to the original payment method within five business days."


@pytest.mark.parametrize("extra", [{}, {"evidence": " "}, {"evidence": 5}, {"evidence": None}])
def test_missing_evidence_becomes_the_sentence_nearest_the_question(extra: dict[str, object]) -> None:
    reply = {"questions": [{"question": "Can a cancelled monthly plan stay active?", **extra}]}
    (draft,) = parse_generation(reply, PASSAGE)
    assert not draft.verbatim
    assert draft.evidence.startswith("Monthly plans are not refundable")


def test_evidence_sharing_no_word_falls_back_to_the_first_sentence() -> None:
    (draft,) = parse_generation({"questions": [{"question": "¿Qué?", "evidence": "zzz"}]}, PASSAGE)
    assert (draft.evidence, draft.verbatim) == ("Annual plans are refundable within 30 days of purchase.", False)


@pytest.mark.parametrize(
    "reply",
    [None, 42, "not json", b"{", {}, {"items": []}, {"questions": "several"}, {"questions": None}, ["x"]],
)
def test_parse_generation_tolerates_malformed_replies(reply: object) -> None:
    parsed = read_generation(reply, PASSAGE)
    assert parsed.drafts == ()
    assert parsed.malformed == 1
    assert parse_generation(reply, PASSAGE) == []


def test_parse_generation_skips_and_counts_bad_entries() -> None:
    reply = {
        "questions": [
            {"question": "  ", "evidence": "30 days"},
            {"evidence": "30 days"},
            "How long is the window?",
            {"question": 3, "evidence": "30 days"},
            {"question": "How long is the yearly window?", "evidence": "30 days", "difficulty": "easy"},
        ],
        "notes": "extra keys are ignored",
    }
    parsed = read_generation(reply, PASSAGE)
    assert parsed.malformed == 4
    assert [d.question for d in parsed.drafts] == ["How long is the yearly window?"]


def test_parse_generation_reads_a_json_string_or_a_bare_list() -> None:
    item = {"question": "How long is the yearly window?", "evidence": "30 days"}
    expected = [Draft("How long is the yearly window?", "30 days", True)]
    assert parse_generation(json.dumps({"questions": [item]}), PASSAGE) == expected
    assert parse_generation([item], PASSAGE) == expected


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["question", "evidence", "x"]), inner),
    max_leaves=12,
)


@given(st.lists(st.fixed_dictionaries({}, optional={"question": _json, "evidence": _json}), max_size=5) | _json)
def test_every_parsed_draft_has_evidence_in_the_passage(reply: object) -> None:
    for draft in parse_generation({"questions": reply} if isinstance(reply, list) else reply, PASSAGE):
        assert draft.question.strip()
        assert normalize(draft.evidence) in normalize(PASSAGE.text)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ({"answerable": True, "reason": "states   the window"}, (True, "states the window")),
        ({"answerable": False}, (False, "")),
        ({"answerable": "Yes", "reason": 3}, (True, "")),
        ({"answerable": "false", "reason": "partial"}, (False, "partial")),
        ('{"answerable": true, "reason": "ok"}', (True, "ok")),
    ],
)
def test_parse_check(reply: object, expected: tuple[bool, str]) -> None:
    assert parse_check(reply) == expected


@pytest.mark.parametrize(
    "reply", [None, [], "nope", {"reason": "no verdict"}, {"answerable": "maybe"}, {"answerable": 1}]
)
def test_parse_check_unreadable(reply: object) -> None:
    answerable, reason = parse_check(reply)
    assert answerable is None
    assert reason.startswith("unreadable")


# -- sampling ----------------------------------------------------------------------------------------------------


@st.composite
def passage_sets(draw: st.DrawFn) -> list[Passage]:
    rows = draw(
        st.lists(
            st.tuples(
                st.sampled_from([None, "", "acme", "globex"]),
                st.sampled_from([(), ("faq",), ("howto", "faq"), ("faq", "howto")]),
                st.sampled_from(["d1", "d2", "d3", "d4"]),
            ),
            max_size=40,
        )
    )
    return [
        Passage(f"{doc}#{i}", doc, f"text {i}", tenant=tenant, tags=tags) for i, (tenant, tags, doc) in enumerate(rows)
    ]


def stratum(p: Passage) -> tuple[str | None, str]:
    return (p.tenant, p.tags[0] if p.tags else "")


@settings(max_examples=150)
@given(passage_sets(), st.integers(0, 50), st.integers(0, 2**32 - 1))
def test_stratified_sample_properties(passages: list[Passage], n: int, seed: int) -> None:
    sample = stratified_sample(passages, n, seed)
    assert len(sample) == min(n, len(passages))
    assert len({p.chunk_id for p in sample}) == len(sample)
    assert set(sample) <= set(passages)
    # deterministic, whatever order the passages come in
    shuffled = list(passages)
    random.Random(seed).shuffle(shuffled)
    assert stratified_sample(shuffled, n, seed) == sample
    # every stratum represented once n reaches their number
    strata = Counter(stratum(p) for p in passages)
    taken = Counter(stratum(p) for p in sample)
    if n >= len(strata):
        assert set(taken) == set(strata)
    # shared evenly: a stratum left with passages got at least as many as any other, less one
    for s in strata:
        if taken[s] < strata[s]:
            assert all(taken[t] <= taken[s] + 1 for t in strata)
        # inside a stratum, documents likewise
        docs = Counter(p.doc_id for p in passages if stratum(p) == s)
        got = Counter(p.doc_id for p in sample if stratum(p) == s)
        for d in docs:
            if got[d] < docs[d]:
                assert all(got[e] <= got[d] + 1 for e in docs)


def test_stratified_sample_returns_all_when_n_is_large() -> None:
    passages = [Passage(f"d{i % 3}#{i}", f"d{i % 3}", "t", tags=(("a",), ("b",))[i % 2]) for i in range(9)]
    sample = stratified_sample(passages, 100, seed=1)
    assert sorted(p.chunk_id for p in sample) == sorted(p.chunk_id for p in passages)
    assert len({tuple(p.chunk_id for p in stratified_sample(passages, 100, seed=s)) for s in range(10)}) > 1


def test_one_long_document_does_not_dominate() -> None:
    long_doc = [Passage(f"manual#{i}", "manual", "t") for i in range(50)]
    short = [Passage(f"note{i}#0", f"note{i}", "t") for i in range(4)]
    sample = stratified_sample(long_doc + short, 5, seed=0)
    assert {p.doc_id for p in sample} == {"manual", "note0", "note1", "note2", "note3"}


def test_a_small_stratum_gives_its_share_to_the_others() -> None:
    big = [Passage(f"a{i}#0", f"a{i}", "t", tenant="acme") for i in range(20)]
    small = [Passage("g#0", "g", "t", tenant="globex")]
    sample = stratified_sample(big + small, 10, seed=5)
    assert Counter(p.tenant for p in sample) == {"acme": 9, "globex": 1}


def test_stratified_sample_errors() -> None:
    p = Passage("a#0", "a", "t")
    assert stratified_sample([p], 0, seed=0) == []
    with pytest.raises(EvalError):
        stratified_sample([p], -1, seed=0)
    with pytest.raises(EvalError):
        stratified_sample([p, Passage("a#0", "a", "other")], 1, seed=0)


# -- cases -------------------------------------------------------------------------------------------------------


def satisfied_by_own_chunk(case_evidence_passage: Passage, case: object) -> bool:
    from eval.cases import Case

    assert isinstance(case, Case)
    p = case_evidence_passage
    retrieved = [Retrieved("other#0", "other", p.text), Retrieved(p.chunk_id, p.doc_id, p.text)]
    return judge(case.relevant, retrieved, "chunk").first_ranks == (2,)


def test_synthetic_case_label_is_satisfied_by_the_passage() -> None:
    draft = Draft("How long do yearly subscribers have to ask for money back?", "within 30 days", True)
    case = synthetic_case(draft, PASSAGE, case_id=case_id_for(PASSAGE, draft.question), model="gpt-x")
    assert satisfied_by_own_chunk(PASSAGE, case)
    assert [label.to_json() for label in case.relevant] == [{"doc_id": "billing/refunds", "evidence": "within 30 days"}]
    assert case.source == "synthetic"
    assert case.generator == {"model": "gpt-x", "prompt_version": PROMPT_VERSION}
    assert case.filters == {"tenant": "acme"}
    assert case.category == "Billing"


def test_a_located_evidence_always_makes_a_satisfiable_case() -> None:
    reply = {"questions": [{"question": "Where does refunded money go?", "evidence": "back to the card you used"}]}
    (draft,) = parse_generation(reply, PASSAGE)
    assert not draft.verbatim
    assert satisfied_by_own_chunk(PASSAGE, synthetic_case(draft, PASSAGE, case_id="syn-1", model="m"))


@given(st.text(max_size=40), st.text(max_size=40).filter(str.strip))
def test_any_parsed_draft_makes_a_satisfiable_case(evidence: str, question: str) -> None:
    for draft in parse_generation({"questions": [{"question": question, "evidence": evidence}]}, ZH_PASSAGE):
        case = synthetic_case(draft, ZH_PASSAGE, case_id=case_id_for(ZH_PASSAGE, question), model="m")
        assert satisfied_by_own_chunk(ZH_PASSAGE, case)


def test_synthetic_case_refuses_evidence_outside_the_passage() -> None:
    with pytest.raises(EvalError, match="not in passage"):
        synthetic_case(Draft("How long is the window?", "90 days", False), PASSAGE, case_id="syn-1", model="m")
    with pytest.raises(EvalError):
        synthetic_case(Draft("How long is the window?", "30 days", True), PASSAGE, case_id="syn-1", model=" ")


def test_synthetic_case_category_and_filters() -> None:
    draft = Draft("How long is the yearly window?", "30 days", True)
    tagged = Passage("t#0", "t", TEXT, tags=("faq",))
    bare = Passage("b#0", "b", TEXT, heading_path=("  ",))
    assert synthetic_case(draft, tagged, case_id="s", model="m").category == "faq"
    assert synthetic_case(draft, bare, case_id="s", model="m").category == "synthetic"
    assert synthetic_case(draft, bare, case_id="s", model="m", category="refunds").category == "refunds"
    assert synthetic_case(draft, bare, case_id="s", model="m").filters == {}


def test_synthetic_case_round_trips_through_json() -> None:
    draft = Draft("年度订阅多久之内可以退款？", "三十天内", True)
    case = synthetic_case(
        draft, ZH_PASSAGE, case_id=case_id_for(ZH_PASSAGE, draft.question), model="m", created_at="2026-01-01T00:00:00Z"
    )
    assert case_from_json(json.loads(json.dumps(case.to_json()))) == case
    assert parse_jsonl(dump_jsonl([case])) == [case]
    assert case.to_json()["generator"] == {"model": "m", "prompt_version": PROMPT_VERSION}


def test_case_id_for() -> None:
    question = "How long is the yearly window?"
    expected = hashlib.sha256(f"{PASSAGE.chunk_id}\n{normalize(question)}".encode()).hexdigest()[:12]
    assert case_id_for(PASSAGE, question) == "syn-" + expected
    assert re.fullmatch(r"syn-[0-9a-f]{12}", case_id_for(PASSAGE, question))
    assert case_id_for(PASSAGE, question) != case_id_for(ZH_PASSAGE, question)
    assert case_id_for(PASSAGE, question) != case_id_for(PASSAGE, "How long is the monthly window?")


def test_passage_needs_ids_and_text_only_to_write_questions() -> None:
    with pytest.raises(EvalError):
        Passage("", "a", "text")
    stub = Passage("a#0", "a", "")  # sampling needs no text
    assert stratified_sample([stub], 1, seed=0) == [stub]
    with pytest.raises(EvalError, match="no text"):
        generation_messages(stub, 1)
    (draft,) = parse_generation({"questions": [{"question": "How long is the window?", "evidence": "30 days"}]}, stub)
    with pytest.raises(EvalError, match="not in passage"):
        synthetic_case(draft, stub, case_id="s", model="m")
