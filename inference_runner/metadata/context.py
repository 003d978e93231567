"""Clinical context of a mention in a report: medspaCy's ConText and Sectionizer.

A mention (a candidate span found by the extractors' patterns: a phase phrase, a contrast
mention, an age, a sex word, a race phrase) is used as the report's value only when it is
**asserted** and about the **current study** and the **patient**. Every other mention is
kept in the evidence table with its context label and never becomes the value:

- ``negated``: "no IV contrast was administered" (a negated *contrast* mention means
  non-contrast; a negated phase, "an arterial phase was not obtained", says nothing),
- ``historical``: about a prior study ("compared with the prior non-contrast study",
  "(prior study: without IV contrast)", a line of a COMPARISON / PRIORS section),
- ``hypothetical``: recommended or conditional ("recommend arterial phase CT", "if
  symptoms persist, consider ..."),
- ``family``: about a relative ("mother, 60, with pancreatic cancer").

How (Chapman et al. 2001, NegEx; Harkema et al. 2009, ConText; Eyre et al. 2021,
medspaCy): the report is tokenized by medspaCy's tokenizer and split into sentences at
``. ; ! ?`` before white space, new lines and ``|`` field separators (PyRuSH, medspaCy's
sentence splitter, does not split upper-case dictation: "...LATE ARTERIAL PHASE. ORAL
CONTRAST: NONE." stays one sentence, and "NONE" then negated the phase); the candidates go into a span group (they may overlap: "72M" is an age and a
sex); ConText (:data:`CONTEXT_RULES`, this module's rule set, not medspaCy's defaults,
whose "history" modifier would make every "CLINICAL HISTORY: 66-year-old woman" a past
event) marks each candidate whose sentence holds a modifier in scope; the Sectionizer
(:data:`SECTION_RULES`, radiology headers at the start of a line) marks a candidate in a
comparison section as historical. The first category that applies, in the order
family, historical, hypothetical, negated, is the label (a negated contrast mention of a
prior study is historical: it says nothing of the current one). The sections count only
in a sectioned report (two or more headers): a lone "Comparison: ..." line in prose does
not make the rest of the report a comparison.

medspaCy is rule-based and needs no model download (spaCy's blank English); it is part of
the runner extra (``pip install 'clinrel[runner]'``). Without it, :func:`contexts` raises
:class:`MissingContextEngine` (the CLI exits 2 with the install command).

References: Chapman WW et al. (2001) J Biomed Inform 34:301-310. Harkema H et al. (2009)
J Biomed Inform 42:839-851. Eyre H et al. (2021) AMIA Annu Symp Proc 2021:438-447.
"""
from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass

ASSERTED = "asserted"
NEGATED = "negated"
HISTORICAL = "historical"
HYPOTHETICAL = "hypothetical"
FAMILY = "family"
#: the context labels of the evidence table's ``context`` column
CONTEXTS = (ASSERTED, NEGATED, HISTORICAL, HYPOTHETICAL, FAMILY)
#: ConText category -> label, in the order they win when several apply
CATEGORY_LABEL = {"FAMILY": FAMILY, "HISTORICAL": HISTORICAL,
                  "HYPOTHETICAL": HYPOTHETICAL, "NEGATED_EXISTENCE": NEGATED}
#: section categories whose mentions are about a prior study
HISTORICAL_SECTIONS = ("comparison",)

# target types (the candidates' kinds)
PHASE, CONTRAST, AGE, SEX, RACE = "PHASE", "CONTRAST", "AGE", "SEX", "RACE"
_STUDY = {PHASE, CONTRAST}
_PERSON = {AGE, SEX, RACE}

#: (literal or token pattern, category, direction, allowed target types, max_scope)
CONTEXT_RULES = [
    # negation of a study attribute (NegEx's window: a few tokens)
    *[(w, "NEGATED_EXISTENCE", "FORWARD", _STUDY, 4) for w in
      ("no", "not", "without", "w/o", "wo", "absence of", "never")],
    ([{"LOWER": "w"}, {"TEXT": "/"}, {"LOWER": "o"}], "NEGATED_EXISTENCE", "FORWARD", _STUDY, 4),
    *[(w, "NEGATED_EXISTENCE", "BACKWARD", _STUDY, 5) for w in
      ("not given", "not administered", "not acquired", "not obtained", "not performed",
       "not done", "not used", "not injected", "omitted", "withheld")],
    # "IV contrast: none", "contrast declined": said of contrast only, never of a phase
    *[(w, "NEGATED_EXISTENCE", "BACKWARD", {CONTRAST}, 3) for w in
      ("none", "nil", "declined", "contraindicated", "refused")],
    # a prior study
    *[(w, "HISTORICAL", "FORWARD", _STUDY, None) for w in
      ("prior", "previous", "previously", "earlier", "compared with", "compared to",
       "comparison", "in comparison", "outside", "old study", "last study", "last scan",
       "prior study", "prior exam", "prior ct", "prior mri", "priors")],
    *[(w, "HISTORICAL", "BACKWARD", _STUDY, 6) for w in
      ("on the prior", "on prior", "on the previous", "from the prior", "previously")],
    # recommended, conditional
    *[(w, "HYPOTHETICAL", "FORWARD", _STUDY, None) for w in
      ("recommend", "recommended", "recommendation", "recommends", "suggest", "suggested",
       "consider", "considered", "could", "would", "should", "if", "may be", "can be",
       "advise", "advised", "to be performed", "planned", "proposed", "next step")],
    *[(w, "HYPOTHETICAL", "BACKWARD", _STUDY, 8) for w in
      ("is advised", "is recommended", "is suggested", "could be considered",
       "would be helpful", "may be helpful", "should be considered", "if needed",
       "for further characterization", "for further characterisation")],
    # a relative
    *[(w, "FAMILY", "FORWARD", _PERSON, None) for w in
      ("mother", "father", "sister", "brother", "son", "daughter", "aunt", "uncle",
       "grandmother", "grandfather", "cousin", "sibling", "siblings", "parent", "parents",
       "mom", "dad", "family", "family history", "family hx", "fam hx", "fhx", "fh",
       "wife", "husband", "spouse", "twin")],
]
#: modifiers that end a modifier's scope (ConText's termination terms)
TERMINATE = ("but", "however", "although", "though", "current", "currently", "today",
             "now", "this study", "this exam", "present study", "current study", "which")
#: (header literal, category): radiology report sections
SECTION_RULES = [
    *[(h, "comparison") for h in ("comparison", "comparisons", "comparison studies",
                                  "priors", "prior studies", "prior exams", "prior imaging",
                                  "previous studies")],
    *[(h, "technique") for h in ("technique", "protocol", "procedure", "exam", "examination")],
    *[(h, "findings") for h in ("findings", "finding", "results")],
    *[(h, "impression") for h in ("impression", "conclusion", "opinion", "summary")],
    *[(h, "history") for h in ("clinical history", "clinical information", "history",
                               "indication", "indications", "reason for exam",
                               "demographics", "clinical details")],
    *[(h, "note") for h in ("note", "notes", "comment", "comments", "addendum")],
]

MSG_NO_ENGINE = ("report-text metadata extraction reads each mention's clinical context "
                 "with medspaCy (ConText, Sectionizer), which is not installed ({detail}); "
                 "install it with: pip install 'clinrel[runner]'")


def _config_error():
    from ..config import ConfigError

    return ConfigError


class MissingContextEngine(_config_error()):
    """medspaCy is not installed (a bad setup: the CLI exits 2 naming the install)."""


@dataclass(frozen=True)
class Mention:
    """A candidate span: ``kind`` (PHASE, CONTRAST, AGE, SEX, RACE), ``start``/``end``
    character offsets into the text."""

    kind: str
    start: int
    end: int


def available() -> bool:
    """True when medspaCy can be imported here."""
    try:
        _pipeline()
    except MissingContextEngine:
        return False
    return True


@functools.lru_cache(maxsize=1)
def _pipeline():
    """The medspaCy pipeline (built once): tokenizer, PyRuSH sentences, ConText on the
    ``clinrel_mentions`` span group with :data:`CONTEXT_RULES`, Sectionizer with
    :data:`SECTION_RULES` (headers at the start of a line)."""
    try:
        import medspacy
        from medspacy.context import ConTextRule
        from medspacy.section_detection import SectionRule
    except ImportError as exc:  # medspacy or one of its own packages missing
        raise MissingContextEngine(MSG_NO_ENGINE.format(detail=exc)) from None
    nlp = medspacy.load(medspacy_enable=["medspacy_tokenizer"])
    context = nlp.add_pipe("medspacy_context", config={
        "rules": None, "input_span_type": "group", "span_group_name": "clinrel_mentions"})
    rules = []
    for literal, category, direction, allowed, scope in CONTEXT_RULES:
        pattern = literal if isinstance(literal, list) else [{"LOWER": w} for w in literal.split()]
        name = literal if isinstance(literal, str) else "".join(t.get("LOWER", t.get("TEXT", ""))
                                                               for t in literal)
        rules.append(ConTextRule(name, category, pattern=pattern, direction=direction,
                                 allowed_types=allowed, max_scope=scope))
    rules += [ConTextRule(t, "TERMINATE", pattern=[{"LOWER": w} for w in t.split()],
                          direction="TERMINATE") for t in TERMINATE]
    context.add(rules)
    sectionizer = nlp.add_pipe("medspacy_sectionizer", config={
        "rules": None, "require_start_line": True, "input_span_type": "group",
        "span_group_name": "clinrel_mentions"})
    sectionizer.add([SectionRule(f"{h}", c, pattern=_header_pattern(h)) for h, c in SECTION_RULES])
    return nlp


#: a sentence ends at . ; ! ? before white space (not after an abbreviation such as
#: "i.v." or "y.o."), at a new line and at a field separator "|"
_BOUNDARY = re.compile(r"[.;!?](?=\s|$)|\n|\|")
_ABBREVIATION = re.compile(r"(?:\b(?:i\.v|y\.o|p\.o|e\.g|i\.e|dr|mr|mrs|ms|vs|approx|st|pt|yrs?|no)|"
                           r"\b[a-z])$", re.IGNORECASE)


def _sentences(doc, text: str) -> None:
    """Mark sentence starts on ``doc`` by :data:`_BOUNDARY` (a rule that reads upper-case
    dictation and pipe-separated templates alike)."""
    cuts = [m.end() for m in _BOUNDARY.finditer(text)
            if not (m.group() == "." and _ABBREVIATION.search(text[max(0, m.start() - 8):m.start()]))]
    for i, tok in enumerate(doc):
        # a cut between the previous token's start and this token's start opens a sentence
        k = bisect.bisect_right(cuts, tok.idx)
        tok.is_sent_start = i == 0 or (k > 0 and cuts[k - 1] > doc[i - 1].idx)


def _header_pattern(header: str) -> list[dict]:
    """Tokens of ``header`` (any case) followed by ':' or '|'."""
    return ([{"LOWER": w} for w in header.split()]
            + [{"TEXT": {"IN": [":", "|"]}}])


def top_label(labels) -> str | None:
    """The label that wins among ``labels`` (order: family, historical, hypothetical,
    negated); None for none (asserted)."""
    return next((lab for lab in CATEGORY_LABEL.values() if lab in labels), None)


def contexts(text: str, mentions: list[Mention]) -> list[frozenset]:
    """The context labels (a subset of :data:`CONTEXTS` less ``asserted``; empty: the
    mention is asserted, current and about the patient) of each mention of ``text``."""
    if not mentions:
        return []
    nlp = _pipeline()
    doc = nlp.make_doc(text)
    _sentences(doc, text)
    spans, index = [], []
    for i, m in enumerate(mentions):
        sp = doc.char_span(m.start, m.end, label=m.kind, alignment_mode="expand")
        if sp is not None and len(sp):
            spans.append(sp)
            index.append(i)
    doc.spans["clinrel_mentions"] = spans
    doc = nlp.get_pipe("medspacy_sectionizer")(doc)
    doc = nlp.get_pipe("medspacy_context")(doc)
    sectioned = len(doc._.sections) >= 2
    out = [frozenset()] * len(mentions)
    for i, sp in zip(index, doc.spans["clinrel_mentions"]):
        cats = {CATEGORY_LABEL[mod.category] for mod in sp._.modifiers
                if mod.category in CATEGORY_LABEL}
        if (sectioned and sp.label_ in _STUDY
                and doc[sp.start]._.section_category in HISTORICAL_SECTIONS):
            cats.add(HISTORICAL)
        out[i] = frozenset(cats)
    return out
