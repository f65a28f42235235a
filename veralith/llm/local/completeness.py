"""Local completeness: which claims answer which sub-question, which only support an answer, which
sub-questions a gap statement declines, and how fully each sub-question is answered.

A claim *answers* a sub-question when it gives what the question asks for:
- a question that names its answer's type (who, when, where, how many, what price...) is answered by
  a claim holding a value of that type (veralith/llm/local/answer_types.py) that is not one of the
  question's own words, about the question's content ("how many vacation days" is answered by
  "25 vacation days", not by "until 30 June"; "no checked bags" is a count too, of none);
- a yes/no question by a claim that opened with "yes"/"no", or that carries most of its content;
- "how do I..." by an instruction;
- any other question by a claim that carries most of its distinctive content.
Terms every sub-question shares (the subject a split query repeats) count for little, so a claim
lands on the sub-questions whose distinctive terms it uses; one claim may answer several, and a
response's only claim answers each typed part for which it holds a value no other part could take
("Let your team lead know by 9:30" answers both "who" and "by what time"). A claim
about what a sub-question turns on, that uses the verb the question asks about ("do not use it
for more than 10 days" beside "how often can I use..."), that shares the *new* content of an
answering claim (words neither in the question nor generic), or that refers by "he"/"her" to the
person an answer named, *supports* that answer; anything else is extra, even when it mentions the
question's topic ("the filter should be replaced every six months" does not answer "how do I reset
the filter light?"). An open request ("summarise the passage") is answered by every on-topic claim.
A sub-question that claims answer but a gap statement declines in part (the gap uses words of the
question that no answering claim uses) is `partial`. The completeness judge never sees the context.
"""

from __future__ import annotations

import re

from veralith.llm.local.answer_types import DURATION_NORMS, answer_positions, asked_for, has_answer, subject_norms
from veralith.llm.local.decompose import gap_topic
from veralith.llm.local.evidence import Term, terms_of
from veralith.llm.local.lexicon import GENERIC, STOPWORDS, tokens
from veralith.llm.local.wordlists import words
from veralith.llm.tasks import ClaimIn, ClaimRole, CompletenessInput, CompletenessOutput, GapLink, SubQuestionStatus

__all__ = ["completeness"]

_OPEN = re.compile(r"^\s*(?:summari[sz]e|describe|explain|tell me|give (?:me )?an? (?:overview|summary)|list|"
                   r"outline|what (?:do you know|can you tell me)|overview)\b", re.I)
_YES_NO_Q = re.compile(r"^\W*(?:is|are|was|were|do|does|did|can|could|should|would|will|has|have|had|may|must)\b",
                       re.I)
_HOW_TO = re.compile(r"^\W*how\s+(?:do|does|can|could|should|would|to)\s+(?:(?:i|you|we|one|they|people)\s+)?(.*)$",
                     re.I)
_WHAT = re.compile(r"^\W*(?:what|which)\s+(.*)$", re.I)
_COUNTED = re.compile(r"\bhow (?:many|much)\s+(.*)$", re.I)
_DEPENDS = re.compile(r"\b(?:it depends|depends on|depending on|varies|may vary|can vary)\b", re.I)
# Verbs an instruction opens with ("Press and hold...", "Go to Settings...").
_INSTRUCTION = words("instruction_verbs")
# "This is because...", "That applies only to...": a sentence about the previous statement. ("It sails
# on the MS Solenne" is a new fact about the entity, not about the answer.)
_BACK_REFERENCES = words("back_references")
_AUX = words("question_auxiliaries")
_ANSWERS = 0.5        # share of a sub-question's weighted distinctive terms an untyped answer must carry
_TYPED_ANSWERS = 0.34  # a typed answer also carries the value asked for, so it may say less of the question
_REPLY_ANSWERS = 0.25  # a "yes"/"no" reply need only name what the yes/no question is about
_SHARED_SUBJECT = 0.3  # weight of a term every sub-question shares (the subject a split query repeats)
_GAP_NEAR_BEST = 0.8   # a gap declines every sub-question it matches nearly as well as its best
_COUNTED_WITHIN = 3    # words after a number within which the counted noun must stand ("25 vacation days")
_TOPIC_ROUNDS = 3      # rounds in which an open request's on-topic claims spread to the claims they share words with


def _share(claim: list[Term], terms: list[Term], distinct: dict[str, float]) -> float:
    total = sum(t.weight * distinct.get(t.norm, 1.0) for t in terms)
    if not total:
        return 0.0
    norms = {t.norm for t in claim}
    return sum(t.weight * distinct.get(t.norm, 1.0) for t in terms if t.norm in norms) / total


def _counted(question: str) -> set[str]:
    """The noun a "how many/much X" question counts: a number answers it only next to X."""
    match = _COUNTED.search(question)
    if not match:
        return set()
    out = set()
    for word in match.group(1).split():
        if word.lower().strip("?,.") in _AUX:
            break
        out |= {t.norm for t in terms_of(word)}
    return out


def _counts(text: str, nouns: set[str]) -> bool:
    toks = tokens(text)
    return _zero(text, nouns) or any(t.is_number and any(u.norm in nouns for u in toks[i + 1:i + 1 + _COUNTED_WITHIN])
                                     for i, t in enumerate(toks))


# "no checked bags", "zero fees": a count of none. A comma after "no" ("No, checked bags cost...") is a
# reply to a yes/no question, not a quantity.
_ZERO = re.compile(r"\b(?:no|zero)\s+((?:[\w-]+\s+){0,2}[\w-]+)", re.I)


def _zero(text: str, nouns: set[str]) -> bool:
    """Does `text` count none of `nouns` (the thing a "how many/much" question counts)?"""
    return any({t.norm for t in terms_of(m.group(1))} & nouns for m in _ZERO.finditer(text))


def _focus(question: str, naming: frozenset[str]) -> set[str]:
    """The word a question turns on: the thing asked for ("what *warranty*..."), the action asked
    about ("how do I *reset*..."), else its first plain content word ("when was the tower *completed*")."""
    # A closing "last"/"take" names no answer shape here: "how long does the battery *last*" turns on
    # the lasting, and a claim that only mentions the battery is about something else.
    naming = naming - DURATION_NORMS
    for pattern in (_WHAT, _HOW_TO):
        match = pattern.match(question)
        if match:
            terms = [t for t in terms_of(match.group(1))
                     if not (t.is_number or t.is_capital or t.norm in naming or t.text.lower() in GENERIC)]
            if terms:
                return {terms[0].norm}
    # Otherwise the predicate, which English puts last ("when was the tower *completed*", "how long
    # does the battery *last*").
    plain = [t for t in terms_of(question)
             if not (t.is_capital or t.is_number or t.norm in naming or t.text.lower() in GENERIC)]
    return {plain[-1].norm} if plain else set()


# Auxiliaries after which a question puts its subject and then its main verb ("does Acme *match*...",
# "can I *use*..."), and the subjects short enough to skip without a parser: a pronoun or a name.
_DO_AUX = words("do_auxiliaries")
_PRONOUN_SUBJECTS = words("pronoun_subjects")
# Pronouns that can only stand for a person: "You can find *her* at..." is about the person an answer named.
_PERSONAL = words("personal_pronouns")


def _verb(question: str) -> set[str]:
    """The main verb of an auxiliary question whose subject is a pronoun or a bare name ("Does Fennick
    Logistics *match*...", "How often can I *use*..."): what the question asks about the subject,
    even when it is a light verb the weighting treats as generic. Empty when the subject is a noun
    phrase ("does the Northern Star cruise visit"): there a noun cannot be told from the verb."""
    toks = tokens(question)
    for i, tok in enumerate(toks[:-1]):
        if tok.text.lower() not in _DO_AUX:
            continue
        j = i + 1
        if toks[j].text.lower() in _PRONOUN_SUBJECTS:
            j += 1
        else:
            while j < len(toks) and (toks[j].is_capital or (toks[j].is_number and j > i + 1)):
                j += 1
        if j == i + 1 or j >= len(toks):
            return set()
        verb = toks[j]
        if verb.is_number or verb.is_capital or verb.text.lower() in STOPWORDS:
            return set()
        return {t.norm for t in terms_of(verb.text)}
    return set()


def _instruction(text: str) -> bool:
    """An imperative: opens with an instruction verb followed by a function word or a name ("Set the...",
    "Press and hold", "Take it to", "Go to Settings"), not by a noun it modifies ("Log files are...")."""
    toks = tokens(text)
    if len(toks) < 2 or toks[0].text.lower() not in _INSTRUCTION:
        return False
    follower = toks[1]
    return follower.text.lower() in STOPWORDS or follower.is_capital or follower.is_number


def _answers(claim: ClaimIn, terms: list[Term], question: str, q_terms: list[Term], distinct: dict[str, float],
             lead: bool, whole: bool = False) -> bool:
    """Does the claim give what `question` asks for? `lead`: it is the response's first claim offering a
    value of the asked type to the only sub-question (answers come first). `whole`: it is the response's
    only claim, so a value of the asked type in it is the response's answer to each typed part ("Who do I
    tell, and by what time?" - "Let your team lead know by 9:30")."""
    kind, naming = asked_for(question)
    asked = [t for t in q_terms if t.norm not in naming]
    share = _share(terms, asked, distinct)
    norms = {t.norm for t in terms}
    if kind is not None and kind != "definition":
        own = frozenset(t.norm for t in q_terms)
        # "Which port..." is also answered by naming an instance ("port 8443"), and a "when"/"what
        # period" question by a duration ("a two-year warranty").
        instance = bool(naming & norms) and any((t.is_number or t.is_capital) and t.norm not in own for t in terms)
        counted = _counted(question) - naming
        if not (has_answer(kind, claim.text, own) or instance
                or (kind == "date" and has_answer("number", claim.text, own))
                or (kind == "number" and bool(counted) and _zero(claim.text, counted))):
            return False
        if kind == "number" and counted and not _counts(claim.text, counted):
            return False
        return share >= _TYPED_ANSWERS or lead or whole or bool(_focus(question, naming) & norms)
    if _YES_NO_Q.match(question) and (claim.context_note or "").startswith("replies "):
        return share >= _REPLY_ANSWERS or lead
    if _HOW_TO.match(question):
        # "How do I set the log level?" is answered by an instruction, or by a statement of the action
        # asked about; "Log files are rotated daily" shares words but answers nothing.
        if _instruction(claim.text):
            return lead or share > 0
        return share >= _ANSWERS and bool(_focus(question, naming) & norms)
    return share >= _ANSWERS


def _own_values(claim: ClaimIn, sqs: dict[str, str]) -> dict[str, set[str]]:
    """{claim id: the typed sub-questions for which the claim holds a value of the asked type that no
    other typed sub-question could take as its own}: "Let your team lead know by 9:30" gives "who" a
    role and "by what time" a time; "...founded by Agnes Tollard" offers its one name to both "who"
    and "where", so it is no whole answer to either."""
    # Every part's words are excluded from every part: "where did *it* first meet" is about the
    # guild the other part names, so naming the guild is no place.
    asked = frozenset(t.norm for text in sqs.values() for t in terms_of(text))
    positions = {}
    for q, text in sqs.items():
        kind, _ = asked_for(text)
        if kind is not None and kind != "definition":
            positions[q] = answer_positions(kind, claim.text, asked)
    mine = {q for q, found in positions.items()
            if len(positions) > 1 and found and all(found - other for o, other in positions.items() if o != q)}
    return {claim.id: mine}


def completeness(payload: CompletenessInput) -> CompletenessOutput:
    sqs = {sq.id: sq.text for sq in payload.sub_questions}
    sq_terms = {q: terms_of(text) for q, text in sqs.items()}
    counts: dict[str, int] = {}
    for terms in sq_terms.values():
        for norm in {t.norm for t in terms}:
            counts[norm] = counts.get(norm, 0) + 1
    # A term in every one of several sub-questions (their shared subject) does not tell them apart.
    distinct = {n: (_SHARED_SUBJECT if len(sqs) > 1 and c == len(sqs) else 1.0) for n, c in counts.items()}
    claim_terms = {c.id: terms_of(c.text) for c in payload.claims}
    asked = {t.norm for terms in sq_terms.values() for t in terms}
    open_sqs = [q for q, text in sqs.items() if _OPEN.match(text)]
    role: dict[str, tuple[str, list[str], str]] = {}
    led = False   # has a claim already answered the only sub-question?
    own_value = _own_values(payload.claims[0], sqs) if len(payload.claims) == 1 else {}
    for claim in payload.claims:
        lead = len(sqs) == 1 and not led
        answered = [q for q in sqs if q not in open_sqs
                    and _answers(claim, claim_terms[claim.id], sqs[q], sq_terms[q], distinct, lead,
                                 whole=q in own_value.get(claim.id, ()))]
        led = led or bool(answered)
        if not answered and claim.context_note and claim.context_note.startswith("answers ") and len(sqs) == 1:
            answered = list(sqs)   # a bare answer ("six", "Argentina") answers the one question it was given for
        if answered:
            role[claim.id] = ("answers", answered, "gives what " + ", ".join(answered) + " asks for")
    if open_sqs and payload.claims:
        # "Summarise the passage" shares no words with a good summary: the lead claim answers it, and
        # so does every claim that shares specific content with the request or an answering claim;
        # only an island ("I love pizza") is extra.
        on_topic = [payload.claims[0].id]
        taken = set(on_topic)
        # The words of the request and of every claim found on topic so far (grown as claims join).
        near = {t.norm for t in claim_terms[on_topic[0]]} | {t.norm for q in open_sqs for t in sq_terms[q]}
        for _ in range(_TOPIC_ROUNDS):
            for claim in payload.claims:
                if claim.id in taken:
                    continue
                if {t.norm for t in claim_terms[claim.id] if t.weight >= 1.0} & near:
                    on_topic.append(claim.id)
                    taken.add(claim.id)
                    near |= {t.norm for t in claim_terms[claim.id]}
        for cid in on_topic:
            targets = role.get(cid, ("answers", [], ""))[1] + open_sqs
            role[cid] = ("answers", targets, "on the topic of the request")
    # Support: a claim whose subject is what a sub-question turns on, or something an answer just
    # introduced (a word of it that the question did not use), or that refers back to the claim
    # before it ("This is because...") backs that answer up. Sharing a word elsewhere is not enough:
    # "Staff can also take five days of paid compassionate leave" is extra beside "sixteen weeks of
    # paid parental leave".
    focus = {q: _focus(text, asked_for(text)[1]) for q, text in sqs.items()}
    verbs = {q: _verb(text) for q, text in sqs.items()}
    # For each word an answer or support introduced (not in the question): the first claim, in role
    # order, that introduced it; and the first answer that named someone the question did not. Built
    # when the first claim without a role is reached (most responses have none), then kept current.
    introducer: dict[str, tuple[int, str]] = {}
    named: str | None = None
    indexed = False

    def introduces(cid: str) -> None:
        position = len(introducer)   # any increasing number keeps role order
        for t in claim_terms[cid]:
            if t.norm not in asked and t.norm not in introducer:
                introducer[t.norm] = (position, cid)

    previous: str | None = None
    for claim in payload.claims:
        if claim.id not in role:
            if not indexed:
                indexed = True
                for cid in role:
                    introduces(cid)
                named = next((c for c, (r, _, _) in role.items() if r == "answers" and any(
                    t.is_capital and t.norm not in asked for t in claim_terms[c])), None)
            subject = set(subject_norms(claim.text))
            words = [t.text.lower() for t in tokens(claim.text)]
            first = words[0] if words else ""
            norms = {t.norm for t in tokens(claim.text)}
            # About what the question turns on: its focus as the claim's subject, or the action it asks
            # about anywhere in the claim ("Do not *use* it for more than..." beside "how often can I use").
            about = [q for q in sqs if (focus[q] & subject or verbs[q] & norms) and q not in open_sqs]
            found = [introducer[n] for n in subject if n in introducer]
            introduced = min(found)[1] if found else None
            if introduced is None and _PERSONAL & set(words):
                # "he"/"her" stands for a person; when an answer named one the question did not, the
                # claim is about that answer.
                introduced = named
            if about:
                role[claim.id] = ("supports", about, "about what " + ", ".join(about) + " asks")
                introduces(claim.id)
            elif introduced is not None:
                role[claim.id] = ("supports", list(role[introduced][1]), f"adds detail to {introduced}")
                introduces(claim.id)
            elif first in _BACK_REFERENCES and previous in role:
                role[claim.id] = ("supports", list(role[previous][1]), f"refers back to {previous}")
                introduces(claim.id)
        previous = claim.id
    items = [ClaimRole(claim_id=c.id, role=role.get(c.id, ("extra", [], ""))[0],
                       sub_question_ids=role.get(c.id, ("", [], ""))[1])
             for c in payload.claims]
    answering: dict[str, list[str]] = {q: [] for q in sqs}
    for c, (r, targets, _) in role.items():
        if r == "answers":
            for q in dict.fromkeys(targets):
                answering[q].append(c)
    links = []
    declined_part: set[str] = set()
    for gap in payload.gaps:
        topic = terms_of(gap_topic(gap.text))
        shares = {q: _share(topic, sq_terms[q], distinct) for q in sqs} if topic else {}
        best = max(shares.values(), default=0.0)
        hit = [q for q, v in shares.items() if v > 0 and v >= _GAP_NEAR_BEST * best]
        # A gap naming nothing ("I couldn't find more") declines whatever is left unanswered.
        links.append(GapLink(gap_id=gap.id, sub_question_ids=hit if topic else [q for q in sqs if not answering[q]]))
        for q in hit if topic else []:
            # The gap names a part of the question its answers leave out ("I couldn't find the *check-out*
            # time" beside an answer about check-in): the question is only partly answered. A gap about
            # something the question never asked ("whether the price is higher in summer") changes nothing.
            said = {t.norm for c in answering[q] for t in claim_terms[c]}
            if any(t.norm not in said for t in topic if t.norm in {u.norm for u in sq_terms[q]}):
                declined_part.add(q)
    statuses = []
    for q in sqs:
        members = set(answering[q])
        texts = [c.text for c in payload.claims if c.id in members]
        if not texts:
            statuses.append(SubQuestionStatus(sub_question_id=q, reasoning="no claim answers it", status="unanswered"))
        elif q in declined_part:
            statuses.append(SubQuestionStatus(sub_question_id=q, status="partial",
                                              reasoning="answered in part; a gap statement declines the rest"))
        elif all(_DEPENDS.search(t) for t in texts):
            statuses.append(SubQuestionStatus(sub_question_id=q, reasoning="answered only with what it depends on",
                                              status="partial"))
        else:
            statuses.append(SubQuestionStatus(sub_question_id=q, reasoning="answered by " + ", ".join(answering[q]),
                                              status="answered"))
    return CompletenessOutput(claims=items, gaps=links, sub_questions=statuses)
