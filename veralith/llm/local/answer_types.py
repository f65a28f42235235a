"""What kind of answer a question asks for, and whether a piece of text offers one.

A question names its answer's type in its wording: "who" wants a person or an organisation,
"when" a date, "how many" a number, "how long" a length (of time, mostly), "how often" a frequency,
"where" a place, "what is X" a definition, "which city" a place. ("Why" and "how" ask for a cause or
a manner, which have no recognisable shape.) A span of time is stated in figures ("3 to 5 days") or
in words ("the next day", "a week", "overnight", "daily"): both answer "how long" and "how often",
and a relative day ("the next day") answers "when" as a date does. A passage
can only answer it if a phrase of that type stands near the words the question is about *and* is
not one of the question's own words ("When was Acme founded in 1947?" is not answered by "1947").

Also here: the question's constraint words ("not", "first", "after", a year), which a passage must
state to answer the narrower question, and a sentence's grammatical subject, which says what the
sentence is about. Everything is hand-written general-English knowledge (the word lists are in
veralith/llm/local/words/), never learnt from data.
"""

from __future__ import annotations

import re
from functools import lru_cache

from veralith.llm.local.lexicon import MONTHS, NEGATIONS, STOPWORDS, Token, stem, tokens
from veralith.llm.local.wordlists import lines, words

__all__ = ["ANSWER_KINDS", "DURATION_NORMS", "answer_kind", "answer_positions", "asked_for", "constraints_of",
           "has_answer", "has_constraint", "kind_label", "subject_norms"]

ANSWER_KINDS = ("person", "date", "number", "duration", "frequency", "money", "place", "definition")

# The nouns after "which"/"what" that say what kind of thing the answer is.
_PERSON_NOUNS = frozenset(stem(w) for w in words("person_nouns"))
# People named by their role rather than their name ("residents", "your line manager").
_ROLE_NOUNS = frozenset(stem(w) for w in words("role_nouns")) | _PERSON_NOUNS
_PLACE_NOUNS = frozenset(stem(w) for w in words("place_nouns"))
_DATE_NOUNS = frozenset(stem(w) for w in words("date_nouns"))
_NUMBER_NOUNS = frozenset(stem(w) for w in words("number_nouns"))
# Words that state a quantity without digits ("a dozen", "several hundred", "none").
_QUANTITY_WORDS = words("quantity_words")
_DURATION_VERBS = words("duration_verbs")
DURATION_NORMS = frozenset(stem(w) for w in _DURATION_VERBS)  # what asked_for adds to a how-question's naming
# Nouns that ask for an amount of money: its answer is a figure that is not a span of time.
_MONEY_NOUNS = frozenset(stem(w) for w in words("money_nouns"))
_AUXILIARIES = words("auxiliaries")
_COPULAS = words("copulas")
_HOW_NUMBER = re.compile(r"\bhow (?:many|much|long|old|far|big|large|tall|high|deep|wide|often|fast|heavy)\b")
_WH = re.compile(r"\b(who|whom|whose|when|where|why|which|what|how)\b")
_DEFINITION = re.compile(r"^(?:what (?:is|are) (?:an? |the )?(?![\w/&.'-]+ of\b)[\w/&.'-]+(?: [\w/&.'-]+){0,2}\??$"
                         r"|.*\b(?:meaning of|definition of|what does .+ mean|stands? for)\b)")

# Cue words a definition carries ("is", "refers to", "means").
_DEFINITION_CUES = words("definition_cues")
# Words that make a question ask something narrower than its topic words alone: a negation, an
# order or extreme, a time relation, a comparison. A passage that never states the constraint
# does not answer the narrower question.
_CONSTRAINTS = {key: frozenset(family) for key, *family in lines("constraint_families")}
_SUBJECT_PRONOUNS = words("subject_pronouns")
_YEAR = re.compile(r"[1-9]\d{2,3}|\d{1,2}(?:st|nd|rd|th)")
_CLOCK = re.compile(r"\d{1,2}[:.]\d{2}")
_PATH = re.compile(r"(?:^|\s)(?:~|\.{1,2})?/[\w.-]+")  # a file path or URL path: a place in software
_DATE_WORDS = frozenset(stem(w) for w in words("date_words"))
# A "when" question is also answered by an event it is tied to ("after the merger", "when she left").
_TIME_RELATIONS = words("time_relations")
# Units of a span of time: "a two-year warranty", "within 30 days" answer a question about a period.
_TIME_UNITS = frozenset(stem(w) for w in words("time_units"))
# A unit of time after one of these is a span or a moment stated in words ("a week", "the next day").
_SPAN_HEADS = words("span_heads")
# Words that are a span, moment or frequency of time by themselves ("overnight", "daily").
_SPAN_WORDS = words("span_words")
# "how long" asks for a length, of time mostly; "how often" for a frequency: a figure or a span of time.
_HOW_TIME = {"long": "duration", "often": "frequency"}
# The noun phrase after "which"/"what" that names the answer's type is at most this many words.
_TYPE_PHRASE = 3


@lru_cache(maxsize=8192)
def asked_for(question: str) -> tuple[str | None, frozenset[str]]:
    """(the answer type `question` asks for, the norms of the words that name that type).

    The type is one of ANSWER_KINDS, or None for yes/no questions, "why"/"how" and open asks. The
    naming words ("long" in "how long", "time" in "what time", "city" in "which city") say what
    shape the answer has; a passage need not repeat them to answer, so coverage leaves them out.
    """
    q = " ".join(question.lower().replace("’", "'").split())
    how = _HOW_NUMBER.search(q)
    if how:
        naming = {stem(how.group(0).split()[1])}
        # "how many nights does the cruise *last*", "how long does it *take*": the closing verb only
        # says a duration is asked, as "long" does; a passage stating "a seven-night voyage" answers.
        last = q.rstrip(" ?.!").rsplit(" ", 1)[-1]
        if last in _DURATION_VERBS:
            naming.add(stem(last))
        # "How much does the X300 cost?": an amount of money, which a span of time does not give.
        money = how.group(0) == "how much" and any(stem(w.strip("?,.")) in _MONEY_NOUNS for w in q.split())
        kind = "money" if money else _HOW_TIME.get(how.group(0).split()[1], "number")
        return kind, frozenset(naming)
    matches = list(_WH.finditer(q))
    if not matches:
        return None, frozenset()
    match = matches[0]
    if match.start() == 0 and match.group(1) in ("when", "where") and "," in q:
        # "When the bridge opened, who cut the ribbon?": the opening clause sets the scene; the
        # question proper follows the comma.
        later = [m for m in matches if m.start() > q.index(",")]
        if later:
            match = later[0]
    wh = match.group(1)
    simple = {"who": "person", "whom": "person", "whose": "person", "when": "date", "where": "place"}
    if wh in simple:
        return simple[wh], frozenset()
    if wh in ("why", "how"):
        return None, frozenset()  # a cause or a manner has no shape a word list can recognise
    # which/what: the head of the noun phrase that follows names the type ("which river", "what
    # monthly fee", "what is the capital of..."). After "did"/"does"/"can" the next noun is the
    # subject, not the class.
    after = [w.strip("?,.;:") for w in q[match.end():].split()]
    if after and after[0] in _AUXILIARIES:
        after = after[1:] if after[0] in _COPULAS else []
    phrase: list[str] = []
    for word in after:
        if word in ("the", "a", "an", "kind", "type", "sort") and not phrase:
            continue
        if word in STOPWORDS or word in _AUXILIARIES or len(phrase) == _TYPE_PHRASE:
            break
        phrase.append(word)
    for word in reversed(phrase):
        norm = stem(word)
        for nouns, kind in ((_DATE_NOUNS, "date"), (_NUMBER_NOUNS, "number"), (_PERSON_NOUNS, "person"),
                            (_PLACE_NOUNS, "place")):
            if norm in nouns:
                return ("money" if kind == "number" and norm in _MONEY_NOUNS else kind), frozenset({norm})
    if _DEFINITION.search(q):
        return "definition", frozenset()
    return None, frozenset()


def answer_kind(question: str) -> str | None:
    """The answer type `question` asks for (one of ANSWER_KINDS), or None for yes/no and open asks."""
    return asked_for(question)[0]


def kind_label(kind: str) -> str:
    """How a person would name what is missing: 'a name', 'a date'..."""
    return {"person": "a name", "date": "a date", "number": "a number", "duration": "a length or duration",
            "frequency": "a frequency", "money": "an amount", "place": "a place", "definition": "a definition"}[kind]


def _is_date(tok: Token) -> bool:
    """A year (3-4 digits), an ordinal (of a century or a day), a clock time, a capitalised month, or a
    time word."""
    if tok.is_number:
        return tok.text[:1].isdigit() and bool(_YEAR.fullmatch(tok.norm) or _CLOCK.fullmatch(tok.norm))
    return (tok.norm in MONTHS and tok.text[:1].isupper()) or tok.norm in _DATE_WORDS


def _span_of_time(toks: tuple[Token, ...], i: int) -> bool:
    """A span, moment or frequency of time stated in words: a unit of time after a word that makes it one
    ("a week", "the next day", "every month"), or a word that is one by itself ("overnight", "daily")."""
    tok = toks[i]
    low = tok.text.lower()
    return low in _SPAN_WORDS or (tok.norm in _TIME_UNITS and i > 0 and toks[i - 1].text.lower() in _SPAN_HEADS)


def _opens_name(toks: tuple[Token, ...], i: int) -> bool:
    """A sentence's first word is capitalised anyway: it counts as a name only when the next word is one too
    ("Edda Vinter founded...") and it is no function word ("The Marlow Clockworks...")."""
    return (i == 0 and len(toks) > 1 and toks[0].text[:1].isupper() and toks[0].text.lower() not in STOPWORDS
            and toks[1].is_capital)


@lru_cache(maxsize=16384)
def has_answer(kind: str, sentence: str, question_norms: frozenset[str]) -> bool:
    """Does `sentence` hold a phrase of type `kind` that is not one of the question's own words?"""
    return bool(answer_positions(kind, sentence, question_norms))


def answer_positions(kind: str, sentence: str, question_norms: frozenset[str]) -> frozenset[int]:
    """The token positions (lexicon.tokens) of `sentence` that offer a value of type `kind` and are not
    the question's own words; -1 stands for a place given as a path, which has no one token."""
    toks = tokens(sentence)
    if kind == "place" and _PATH.search(sentence):
        return frozenset({-1})
    if kind == "definition":
        return frozenset(i for i, t in enumerate(toks) if t.text.lower() in _DEFINITION_CUES)
    return frozenset(i for i, tok in enumerate(toks) if tok.norm not in question_norms and _offers(kind, toks, i))


def _offers(kind: str, toks: tuple[Token, ...], i: int) -> bool:
    tok = toks[i]
    if kind == "date":
        # a span of time ("two-year", "30 days") dates an answer about a period
        return _is_date(tok) or tok.text.lower() in _TIME_RELATIONS or _span_of_time(toks, i) \
            or (tok.is_number and i + 1 < len(toks) and toks[i + 1].norm in _TIME_UNITS)
    if kind == "number":
        return tok.is_number or tok.text.lower() in _QUANTITY_WORDS
    if kind in ("duration", "frequency"):
        return tok.is_number or tok.text.lower() in _QUANTITY_WORDS or _span_of_time(toks, i)
    if kind == "money":   # a figure, but not a span of time ("a two-year warranty" is no price); or "free"
        return (tok.is_number and not (i + 1 < len(toks) and toks[i + 1].norm in _TIME_UNITS)) \
            or tok.text.lower() == "free"
    named = (tok.is_capital or _opens_name(toks, i)) and tok.norm not in MONTHS and tok.norm not in _DATE_WORDS
    return (kind in ("person", "place") and named) or (kind == "person" and tok.norm in _ROLE_NOUNS)


@lru_cache(maxsize=8192)
def constraints_of(question: str) -> tuple[str, ...]:
    """The constraint words of `question`: negations (as "not"), extremes, order and time relations, years
    and ordinals written in digits."""
    out: list[str] = []
    toks = tokens(question)
    for i, tok in enumerate(toks):
        low = tok.text.lower()
        if low in NEGATIONS or low.endswith("n't"):
            key = "not"
        elif low == "last" and (i + 1 == len(toks) or toks[i - 1].text.lower() in _SUBJECT_PRONOUNS):
            continue  # the verb: "how long does the battery last?", "will it last"
        elif low in _CONSTRAINTS:
            key = low
        elif tok.is_number and _YEAR.fullmatch(tok.norm):
            key = tok.norm
        else:
            continue
        if key not in out:
            out.append(key)
    return tuple(out)


def has_constraint(key: str, sentence: str) -> bool:
    """Is constraint `key` (from constraints_of) stated in `sentence`?"""
    toks = tokens(sentence)
    if key == "not":
        return any(t.text.lower() in NEGATIONS or t.text.lower().endswith("n't") for t in toks)
    family = _CONSTRAINTS.get(key)
    if family is None:
        return any(t.norm == key for t in toks)
    return any(t.text.lower() in family for t in toks)


# Finite verbs that end a sentence's subject: copulas, auxiliaries and verbs of defining.
_FINITE = words("finite_verbs")
# A sentence's subject ends within its first _SUBJECT_WITHIN words, or it has none we can tell.
_SUBJECT_WITHIN = 15


def _present_verb(toks: tuple[Token, ...], i: int) -> bool:
    tok = toks[i]
    low = tok.text.lower()
    if not (0 < i < len(toks) - 1 and len(low) > 3 and low.endswith("s") and not low.endswith(("ss", "us", "is"))
            and tok.text[0].islower()):
        return False
    before, after = toks[i - 1], toks[i + 1]
    return before.text.lower() not in STOPWORDS and (after.text.lower() in STOPWORDS or after.is_number)


@lru_cache(maxsize=16384)
def subject_norms(sentence: str) -> tuple[str, ...]:
    """Content-word norms of the sentence's grammatical subject: the words before its first finite verb.

    The verb is a copula or auxiliary, a lowercase past-tense form ("Acme *launched* ..."), or a
    lowercase -s form between a content word and a function word or number ("The crossing *takes*
    about 50 minutes"); a sentence whose first 15 words hold no such verb has no subject we can
    tell, and yields ().
    """
    toks = tokens(sentence)
    for i, tok in enumerate(toks[:_SUBJECT_WITHIN]):
        low = tok.text.lower()
        if low in _FINITE or (i > 0 and len(low) > 4 and low.endswith("ed") and not tok.text[0].isupper()) \
                or _present_verb(toks, i):
            return tuple(t.norm for t in toks[:i]
                         if t.text.lower() not in STOPWORDS and (t.is_number or len(t.norm) > 1))
    return ()
