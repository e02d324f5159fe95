"""Learning from labels, the pure half: which cases a model is trained on and which judge it, the passages a case
teaches (the one that answers it, and those the search put first that do not), and whether a tuned model may replace
the served one.

Training takes the tune split of the human-written cases (`eval.sweep.split_cases`: a case's own `split`, else a
seeded hash), every accepted incident (`source: incident`: real failures, the best teachers) and every accepted
synthetic case (`source: synthetic`), unless one is marked `split: test`. Only held-out human-written cases judge the
result: a model is never scored on what it was trained on, nor on questions an LLM wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eval.cases import Case
from eval.matching import Retrieved, judge
from eval.report import SYNTHETIC
from eval.sweep import Comparison, split_cases

INCIDENT = "incident"  # the source of an accepted incident's case (eval.incidents)
LEARNED_FROM = (INCIDENT, SYNTHETIC)  # sources trained on whatever their split (unless marked test)


@dataclass(frozen=True)
class Split:
    """The cases trained on and those held out, and where the training cases come from."""

    train: tuple[Case, ...]
    held_out: tuple[Case, ...]
    origin: str  # how the human cases were split (eval.sweep.split_cases)

    def counts(self) -> dict[str, int]:
        out = {"held_out": len(self.held_out)}
        for case in self.train:
            key = case.source if case.source in LEARNED_FROM else "tune split"
            out[key] = out.get(key, 0) + 1
        return out


def training_split(cases: Sequence[Case], *, seed: int, test_share: float) -> Split:
    """Split `cases` for tuning (see the module docstring).

    Example:
        >>> from eval.cases import Label
        >>> cs = [Case(f"c{i}", "q", (Label(doc_id="d"),), split=("tune", "test")[i % 2]) for i in range(4)]
        >>> cs.append(Case("incident-1", "q", (Label(doc_id="d"),), source="incident"))
        >>> s = training_split(cs, seed=0, test_share=0.5)
        >>> [c.id for c in s.train], [c.id for c in s.held_out]
        (['c0', 'c2', 'incident-1'], ['c1', 'c3'])
    """
    learned = [c for c in cases if c.source in LEARNED_FROM and c.split != "test"]
    human = [c for c in cases if c.source not in LEARNED_FROM]
    tune, test, origin = split_cases(human, seed=seed, test_share=test_share)
    return Split((*tune, *learned), tuple(test), origin)


@dataclass(frozen=True)
class Mined:
    """What one case teaches: its answering passage (None if the search did not find one and the labelled document
    has none that satisfies the label), and the passages ranked above it (or at the top) that do not answer it."""

    case_id: str
    positive: Retrieved | None
    negatives: tuple[Retrieved, ...]
    missed: bool  # the answering passage was not in the searched results


def mine(case: Case, ranked: Sequence[Retrieved], labelled: Sequence[Retrieved], *, negatives: int = 3) -> Mined:
    """The positive and hard negatives of `case` from its search results `ranked` (unit chunk), with `labelled` the
    chunks of its labelled documents (where the positive is looked for when the search missed it).

    The positive is the first ranked chunk that satisfies a label, else the first labelled chunk that does. The hard
    negatives are the highest-ranked chunks that satisfy no label; a chunk of a labelled document counts only when the
    labels say which passage answers (evidence or chunk id), since with a document-level label any of its chunks
    may answer.

    Example:
        >>> from eval.cases import Label
        >>> case = Case("c", "q", (Label(doc_id="a", evidence="yes"),))
        >>> ranked = [Retrieved("b#0", "b", "no"), Retrieved("a#0", "a", "intro"), Retrieved("a#1", "a", "yes")]
        >>> m = mine(case, ranked, [])
        >>> m.positive.chunk_id, [n.chunk_id for n in m.negatives], m.missed
        ('a#1', ['b#0', 'a#0'], False)
    """
    found = judge(case.relevant, ranked, "chunk").relevant
    positive = next((r for r, ok in zip(ranked, found, strict=True) if ok), None)
    missed = positive is None
    if positive is None and labelled:
        answers = judge(case.relevant, labelled, "chunk").relevant
        positive = next((r for r, ok in zip(labelled, answers, strict=True) if ok), None)
    precise = all(label.evidence is not None or label.chunk_id is not None for label in case.relevant)
    labelled_docs = {label.doc_id for label in case.relevant}
    wrong = [
        r
        for r, ok in zip(ranked, found, strict=True)
        if not ok and (precise or r.doc_id not in labelled_docs) and (positive is None or r.text != positive.text)
    ]
    return Mined(case.id, positive, tuple(wrong[:negatives]), missed)


def promotion_refusal(held_out: Comparison | None, *, min_gain: float) -> str | None:
    """Why a tuned model may not replace the served one on its held-out comparison, or None: it must not be worse,
    and must gain at least `min_gain` (0: not worse is enough; the gate still decides).

    Example:
        >>> promotion_refusal(Comparison(0.6, 0.7, -0.1, 0.02, True, 40), min_gain=0.0)
        'the tuned model is worse on the held-out cases (0.600 against 0.700 served, p=0.0200)'
    """
    if held_out is None:
        return "the tuned model was not compared on held-out cases"
    p = "n/a" if held_out.p_value is None else f"{held_out.p_value:.4f}"
    if held_out.improvement < 0:
        return (
            f"the tuned model is worse on the held-out cases ({held_out.winner_mean:.3f} against "
            f"{held_out.current_mean:.3f} served, p={p})"
        )
    if held_out.improvement < min_gain:
        return f"the tuned model gains {held_out.improvement:+.3f} on the held-out cases, under the {min_gain} asked"
    return None
