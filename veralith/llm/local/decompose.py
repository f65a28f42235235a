"""Local decomposition: the query into sub-questions, the response into claims.

Conservative by contract (DESIGN §4): a query is split only where it literally joins distinct
questions, and a response sentence is split only where it clearly states two facts. Nothing is
invented; every claim is a span of the response with boilerplate trimmed off its front.
"""

from __future__ import annotations

import re

from veralith.llm.local.align import claim_of
from veralith.llm.local.lexicon import STOPWORDS, content_terms, tokens
from veralith.llm.tasks import (
    ClaimsInput,
    ClaimsOutput,
    ExtractedClaim,
    ExtractedGap,
    QuestionItem,
    QuestionsInput,
    QuestionsOutput,
    Sentence,
)
from veralith.llm.text import sentence_spans

__all__ = ["claims", "gap_topic", "questions", "split_query"]

_AUX = ("is|are|was|were|do|does|did|can|could|should|would|will|has|have|had|may|might|must|shall|"
        "what|which|who|whom|whose|when|where|why|how")
# "... and what was ...", "...; who ...", "..., and when ..." start a second question.
_QUESTION_JOIN = re.compile(rf"\s*(?:,?\s+(?:and|or|but|also|plus)|;)\s+"
                            rf"(?=(?:also\s+)?(?:(?:by|at|in|on|for|from|to|until|since|with)\s+)?(?:{_AUX})\b)", re.I)
_LEAD_WH = re.compile(r"^\s*(?:what|which|who|whom|whose|when|where|why|how(?:\s+\w+)?)\s+"
                      r"(?:is|are|was|were|does|do|did|has|have|had|can|could|will|would)\s+(.+)$", re.I)
_PRONOUN = re.compile(r"\b(it|its|they|them|their|he|him|his|she|her)\b", re.I)

# Boilerplate at the front of a sentence is trimmed; the rest of the sentence stays a claim.
_PREFIX = re.compile(
    r"^(?:(?:sure|certainly|of course|absolutely|okay|ok|great question|good question|well|so|yes|no|yeah|"
    r"yep|nope|oh|ah|hmm|hi|hello)\b[\s,!.:;-]*|"
    r"(?:based on|according to|from|given|per|as (?:stated|mentioned|described) in) (?:the |this |these |"
    r"provided |given |available )*(?:context|passage|documents?|text|information|sources?|article|"
    r"excerpt|snippets?|search results?)[^,:]*[,:]\s*|"
    r"here(?:'s| is| are)\b[^:\n]{0,80}:\s*|"
    r"(?:in summary|to summarize|in short|overall|in conclusion|summary)\s*[,:]\s*|"
    r"(?:i'm sorry|i am sorry|sorry|unfortunately|i'm afraid|i am afraid)\b[\s,]*(?:but\b[\s,]*)?)", re.I)
_CHITCHAT = re.compile(
    r"^(?:i hope (?:this|that) helps|hope (?:this|that) helps|let me know\b|feel free\b|"
    r"(?:thanks|thank you)\b|you(?:'re| are) welcome|good luck|have a (?:great|nice|good)\b|"
    r"please\b|"
    r"(?:that|this|it)(?:'s| is| was) (?:a |so |really |very |pretty )?(?:great|good|interesting|cool|awesome|nice|fun|"
    r"true|right|amazing|correct|funny|crazy|neat|wild|sad|impressive)\b"
    r"[^.!?]{0,20}[.!]?$|same here|me too|sounds (?:good|great|fun|like)|i agree\b|(?:lol|haha|wow|cool|"
    r"interesting|awesome|nice|great|indeed|exactly|really|oh really|right|true)\b[\s!.]*$)", re.I)
_DOCS = (r"(?:context|passages?|documents?|docs|text|information|sources?|articles?|excerpts?|snippets?|"
         r"search results?|materials?|records?|manual|guide|policy|report|data)")
# A sentence that says the documents lack something: refusal text, never a claim.
_REFUSAL = re.compile(
    r"\b(?:i (?:can ?not|can't|cannot|could not|couldn't|am unable to|'m unable to|was unable to|am not able to|"
    r"'m not able to|do not|don't|did not|didn't) (?:answer|find|locate|see|determine|tell|say|know|provide|help|"
    r"confirm)|i don't know|i do not know|i'm not sure|i am not sure|unable to (?:answer|determine|find|confirm)|"
    rf"{_DOCS}(?:\s+[\w']+){{0,3}}?\s+(?:does not|doesn't|do not|don't|did not|didn't|fails? to|never) "
    r"(?:mention|contain|provide|say|include|specify|state|cover|discuss|address|give|have|indicate|list|"
    r"explain|tell|name|show|describe|detail|reveal|clarify|report|record|confirm)|"
    r"(?:there is|there's|there are|i have|i found) no (?:information|mention|details?|data|evidence|record)|"
    r"no (?:information|mention|details?) (?:is |are |was )?(?:given|provided|available|found|about|on|of)|"
    r"nothing in the " + _DOCS + r"|"
    r"(?:not|\w+n't) (?:mentioned|provided|specified|stated|available|given|covered|included|listed|found) in the "
    + _DOCS + r"|(?:insufficient|not enough) (?:information|context)|" + _DOCS + r" (?:is|are) silent)", re.I)
_REPLY = re.compile(r"^\W*(yes|no)\b", re.I)
_YES_NO = re.compile(r"^\W*(?:yes|no)\W*$", re.I)
_PERSONAL_CLAIM = re.compile(r"^\W*(?:i|i'm|i've|i'd|i'll|we|we're|we've|my|our)\b\s*\w", re.I)
# Assistant service phrases are boilerplate even though they start with "I".
_SERVICE = re.compile(r"^\W*i (?:hope|can help|am happy to|'m happy to|would be happy|'d be happy|can assist)\b", re.I)
_VERBISH = re.compile(r"\b(?:is|are|was|were|be|been|has|have|had|do|does|did|will|would|can|could|"
                      r"\w+ed|\w+s)\b", re.I)
# A second clause with its own subject after ", and"/"; " reads as a second fact.
# A subject this long is not repeated in place of a later part's pronoun (it would not read as one).
_SUBJECT_WORDS = 6
# A bare answer ("Agnes Tollard", "six euros") is one sentence of at most this many content words.
_BARE_ANSWER = 6
# A banter exclamation ("so talented!") has at most this many words; a clause split needs this many
# content words on each side.
_EXCLAMATION_WORDS = 4
_CLAUSE_WORDS = 3
_CLAUSE_SPLIT = re.compile(r"(?:;\s+|,\s+(?:and|but|while|whereas)\s+(?=(?:he|she|it|they|this|these|the|"
                           r"[A-Z][a-z]+)\b))")


def split_query(query: str) -> list[str]:
    """The distinct questions literally present in `query`, each standing alone."""
    text = " ".join(query.split())
    if not text:
        return []
    sentences = [text[s:e] for s, e in sentence_spans(text)] or [text]
    questions = [s for s in sentences if s.rstrip().endswith("?")]
    # Statements around a single question are its setting, not separate asks: keep the query whole.
    parts = questions if len(questions) >= 2 else [text]
    pieces: list[str] = []
    for part in parts:
        pieces += [p.strip(" ,;") for p in _QUESTION_JOIN.split(part) if p.strip(" ,;")]
    return _resolve(pieces) if len(pieces) > 1 else pieces


_BARE_WH = re.compile(r"^(?:(?:by|at|in|on|for|from|to|until|since|with) )?"
                      r"(?:what|which|who|whom|whose|when|where|why|how)(?: \w+)?$", re.I)
_WH_HEAD = re.compile(r"^\s*(?:what|which|who|whom|whose|when|where|why|how(?: much| many| long| often| old)?)\s+",
                      re.I)


def _resolve(pieces: list[str]) -> list[str]:
    """Make each piece a standalone question: end punctuation, capital, pronouns replaced by the first subject,
    and a bare question word ("..., and when?") given the rest of the first question ("When — founded Acme?")."""
    full = [p for p in pieces if not _BARE_WH.match(p.rstrip("?").strip())]
    # "When and where is the market held?": a bare question word borrows the first full question's rest.
    head = _WH_HEAD.sub("", full[0].rstrip("?")).strip() if full else ""
    pieces = [f"{p.rstrip('?').strip()} — {head}" if head and _BARE_WH.match(p.rstrip("?").strip()) else p
              for p in pieces]
    lead = _LEAD_WH.match(pieces[0].rstrip("?"))
    subject = lead.group(1).strip() if lead else None
    if subject and subject.split()[0].lower() in ("a", "an"):
        subject = "the " + subject.split(" ", 1)[1] if " " in subject else subject
    out = []
    for i, piece in enumerate(pieces):
        if i and subject and len(subject.split()) <= _SUBJECT_WORDS:
            piece = _PRONOUN.sub(lambda m: subject + ("'s" if m.group(1).lower() in ("its", "their", "his") else "")
                                 if m.group(1).lower() not in ("her",) else m.group(0), piece, count=1)
        piece = piece[0].upper() + piece[1:]
        if piece[-1] not in "?.!":
            piece += "?"
        out.append(piece)
    return out


def _strip_prefix(text: str) -> tuple[str, int]:
    offset = 0
    while True:
        match = _PREFIX.match(text[offset:])
        if not match or match.end() == 0:
            return text[offset:], offset
        # A lone "No." / "Yes." answering a question is kept; any other prefix with nothing after it
        # ("Here is a summary:") was all boilerplate.
        if not text[offset + match.end():].strip() and _YES_NO.match(text[offset:]):
            return text[offset:], offset
        offset += match.end()


def _informative(text: str) -> bool:
    # At least one content word with letters: "1." or "2019" alone asserts nothing checkable. And
    # something left once layout and discourse words are gone (the judge's own reading, align.claim_of):
    # "(Passage 2)", "Passage 1:" or "Therefore, the answer to the question is:" states no fact.
    return any(not t.is_number and t.text.lower() not in STOPWORDS for t in content_terms(text)) \
        and bool(claim_of(text).terms)


def _exclamation(text: str) -> bool:
    """A short exclamation without names or numbers ("it definitely is!", "so talented!") is banter."""
    toks = tokens(text)
    return (text.rstrip().endswith("!") and len(toks) <= _EXCLAMATION_WORDS
            and not any(t.is_number or t.is_capital for t in toks))


def _split_compound(text: str) -> list[str]:
    parts = [p.strip() for p in _CLAUSE_SPLIT.split(text) if p and p.strip()]
    if len(parts) < 2 or any(len(content_terms(p)) < _CLAUSE_WORDS or not _VERBISH.search(p) for p in parts):
        return [text]
    return parts


_GAP_CLAUSE = re.compile(r"(?:;\s+|,?\s+(?:but|although|though|however,?|while)\s+)", re.I)
# Words that only talk about the documents; what is left of a gap names what is missing.
_META = re.compile(r"\b(?:context|passages?|documents?|docs|text|information|info|sources?|articles?|excerpts?|"
                   r"snippets?|provided|given|mention(?:ed|s)?|say|says|said|state[sd]?|specif(?:y|ies|ied)|"
                   r"contain(?:s|ed)?|find|found|answer|determine|know|sure|details?|data|evidence|available|"
                   r"unable|cannot|can't|couldn't|could|not|don't|doesn't|didn't|there|is|are|no|any|i|"
                   r"i'm|the|a|an|to|from|in|about|whether|if|that|this|me|have|has|do|does)\b", re.I)


def questions(payload: QuestionsInput) -> QuestionsOutput:
    return QuestionsOutput(sub_questions=[QuestionItem(id=f"q{i}", text=t)
                                          for i, t in enumerate(split_query(payload.query), 1)])


def gap_topic(text: str) -> str:
    """What a gap statement says is missing, without the words about the documents."""
    return " ".join(_META.sub(" ", text).split())


def claims(payload: ClaimsInput) -> ClaimsOutput:
    sentences = list(payload.sentences)
    cite = True
    if not sentences and payload.response.strip():
        # No segmentation was passed in: segment here, but cite no ids that were never given.
        sentences = [Sentence(id="", text=payload.response[s:e]) for s, e in sentence_spans(payload.response)]
        cite = False
    found: list[ExtractedClaim] = []
    gaps: list[ExtractedGap] = []
    asked = False
    bare_answer = len(sentences) == 1 and len(content_terms(sentences[0].text)) <= _BARE_ANSWER
    reply = ""   # a lone "No." opening the response replies through the sentence after it
    for sentence in sentences:
        opening = _REPLY.match(sentence.text)
        if not reply and not found and opening and _YES_NO.match(sentence.text):
            reply = opening.group(1).lower()
        body, _ = _strip_prefix(sentence.text.strip())
        body = body.strip()
        if not body:
            continue
        ids = [sentence.id] if cite else []
        if _REFUSAL.search(body):
            # "X is Y, but the documents don't say Z": the gap is refusal text, the rest stays a claim.
            clauses = [c.strip(" ,;") for c in _GAP_CLAUSE.split(body) if c.strip(" ,;")]
            kept = []
            for clause in clauses:
                if _REFUSAL.search(clause):
                    gaps.append(ExtractedGap(id=f"g{len(gaps) + 1}", source_sentence_ids=ids, text=clause))
                else:
                    kept.append(clause)
            body = ", ".join(kept) if len(clauses) > 1 else ""
            if not body or not _informative(body):
                continue
        if body.endswith("?"):
            asked = True
            continue
        if body.endswith(":"):
            continue  # a lead-in ("Instructions:", "Here is a summary of the passage, covering ...:") introduces
            # what follows and states nothing of its own
        yes_no = bare_answer and bool(_YES_NO.match(body)) and bool(payload.query.strip())
        # "I have!" or "I agree with you" asserts something about the speaker: a claim to judge.
        personal = bool(_PERSONAL_CLAIM.match(body)) and not _SERVICE.match(body)
        service = bool(_SERVICE.match(body)) and ":" not in body  # "I can help you with that!"
        if not (yes_no or personal) and (service or _CHITCHAT.match(body) or _exclamation(body)
                                         or not _informative(body)):
            # A lone "yes"/"no" answering a query is an answer; elsewhere it is filler.
            continue
        note = f"answers the query: {payload.query.strip()}" if bare_answer and payload.query.strip() else ""
        said = opening.group(1).lower() if opening else reply
        if not note and said and payload.query.strip():
            # "Yes, dogs are welcome..." replies to a yes/no question; the reply word is trimmed, so say so.
            note = f"replies {said} to: {payload.query.strip()}"
        reply = ""
        for part in _split_compound(body):
            found.append(ExtractedClaim(id=f"c{len(found) + 1}", source_sentence_ids=ids, text=part, note=note))
    return ClaimsOutput(claims=found, gaps=gaps, asks_clarification=asked and not found and not gaps)
