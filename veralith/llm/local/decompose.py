"""Local decomposition: the query into sub-questions, the response into claims.

Conservative by contract (DESIGN §4): a query is split only where it literally joins distinct
questions, and a response sentence is split only where it clearly states two facts. Nothing is
invented; every claim is a span of the response with boilerplate trimmed off its front.
"""

from __future__ import annotations

import re

from veralith.llm.local.lexicon import STOPWORDS, content_terms, tokens
from veralith.llm.tasks import DecomposedClaim, DecomposedSubQuestion, DecomposeInput, DecomposeOutput, Sentence
from veralith.llm.text import sentence_spans

__all__ = ["decompose", "split_query"]

_AUX = ("is|are|was|were|do|does|did|can|could|should|would|will|has|have|had|may|might|must|shall|"
        "what|which|who|whom|whose|when|where|why|how")
# "... and what was ...", "...; who ...", "..., and when ..." start a second question.
_QUESTION_JOIN = re.compile(rf"\s*(?:,?\s+(?:and|or|but|also|plus)|;)\s+(?=(?:also\s+)?(?:{_AUX})\b)", re.I)
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
    r"(?:in summary|to summarize|in short|overall|in conclusion|summary)\s*[,:]\s*)", re.I)
_CHITCHAT = re.compile(
    r"^(?:i hope (?:this|that) helps|hope (?:this|that) helps|let me know\b|feel free\b|"
    r"(?:thanks|thank you)\b|you(?:'re| are) welcome|good luck|have a (?:great|nice|good)\b|"
    r"(?:that|this|it)(?:'s| is| was) (?:a |so |really |very |pretty )?(?:great|good|interesting|cool|awesome|nice|fun|"
    r"true|right|amazing|correct|funny|crazy|neat|wild|sad|impressive)\b"
    r"[^.!?]{0,20}[.!]?$|same here|me too|sounds (?:good|great|fun|like)|i agree\b|(?:lol|haha|wow|cool|"
    r"interesting|awesome|nice|great|indeed|exactly|really|oh really|right|true)\b[\s!.]*$)", re.I)
_REFUSAL = re.compile(
    r"\b(?:i (?:can ?not|can't|cannot|am unable to|'m unable to|am not able to|'m not able to|do not|don't) "
    r"(?:answer|find|determine|tell|say|know|provide|help)|i don't know|i do not know|i'm not sure|"
    r"i am not sure|unable to (?:answer|determine|find)|"
    r"(?:context|passage|documents?|text|information|sources?|article|excerpt|snippets?)s? (?:provided |given )?"
    r"(?:does not|doesn't|do not|don't|did not|didn't|fails? to) (?:mention|contain|provide|say|include|specify|"
    r"state|cover|discuss|address|give|have)|"
    r"(?:there is|there's|there are) no (?:information|mention|details?|data|evidence)|"
    r"no (?:information|mention|details?) (?:is |are )?(?:given|provided|available)|"
    r"not (?:mentioned|provided|specified|stated|available|given|covered) in the (?:context|passage|documents?|"
    r"text|sources?|article|provided)|"
    r"(?:insufficient|not enough) (?:information|context))", re.I)
_YES_NO = re.compile(r"^\W*(?:yes|no)\W*$", re.I)
_PERSONAL_CLAIM = re.compile(r"^\W*(?:i|i'm|i've|i'd|i'll|we|we're|we've|my|our)\b\s*\w", re.I)
# Assistant service phrases are boilerplate even though they start with "I".
_SERVICE = re.compile(r"^\W*i (?:hope|can help|am happy to|'m happy to|would be happy|'d be happy|can assist)\b", re.I)
_CONDITIONAL = re.compile(r"\s*(?:if|unless|when|whenever|in case)\b", re.I)
_HEDGE = re.compile(r"\b(?:may|might|could|possibly|perhaps|likely|probably|maybe|appears? to|seems? to|"
                    r"suggests?)\b", re.I)
_ATTRIBUTED = re.compile(r"\b(?:according to|said|says|stated|reported|claims?)\b", re.I)
_VERBISH = re.compile(r"\b(?:is|are|was|were|be|been|has|have|had|do|does|did|will|would|can|could|"
                      r"\w+ed|\w+s)\b", re.I)
# A second clause with its own subject after ", and"/"; " reads as a second fact.
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


def _resolve(pieces: list[str]) -> list[str]:
    """Make each piece a standalone question: end punctuation, capital, pronouns replaced by the first subject."""
    lead = _LEAD_WH.match(pieces[0].rstrip("?"))
    subject = lead.group(1).strip() if lead else None
    if subject and subject.split()[0].lower() in ("a", "an"):
        subject = "the " + subject.split(" ", 1)[1] if " " in subject else subject
    out = []
    for i, piece in enumerate(pieces):
        if i and subject and len(subject.split()) <= 6:
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
    # At least one content word with letters: "1." or "2019" alone asserts nothing checkable.
    return any(not t.is_number and t.text.lower() not in STOPWORDS for t in content_terms(text))


def _exclamation(text: str) -> bool:
    """A short exclamation without names or numbers ("it definitely is!", "so talented!") is banter."""
    toks = tokens(text)
    return (text.rstrip().endswith("!") and len(toks) <= 4
            and not any(t.is_number or t.is_capital for t in toks))


def _modality(text: str) -> str:
    if _CONDITIONAL.match(text):
        return "conditional"
    if _HEDGE.search(text):
        return "hedged"
    if _ATTRIBUTED.search(text):
        return "attributed_to_source"
    return "asserted"


def _split_compound(text: str) -> list[str]:
    parts = [p.strip() for p in _CLAUSE_SPLIT.split(text) if p and p.strip()]
    if len(parts) < 2 or any(len(content_terms(p)) < 3 or not _VERBISH.search(p) for p in parts):
        return [text]
    return parts


def decompose(payload: DecomposeInput) -> DecomposeOutput:
    sub_questions = [DecomposedSubQuestion(id=f"q{i}", text=t, ambiguity_note=None)
                     for i, t in enumerate(split_query(payload.query), 1)]
    sentences = list(payload.sentences)
    cite = True
    if not sentences and payload.response.strip():
        # No segmentation was passed in: segment here, but cite no ids that were never given.
        sentences = [Sentence(id="", text=payload.response[s:e]) for s, e in sentence_spans(payload.response)]
        cite = False
    claims: list[DecomposedClaim] = []
    refused = asked = False
    bare_answer = len(sentences) == 1 and len(content_terms(sentences[0].text)) <= 6
    for sentence in sentences:
        body, _ = _strip_prefix(sentence.text.strip())
        body = body.strip()
        if not body:
            continue
        if _REFUSAL.search(body):
            refused = True
            continue
        if body.endswith("?"):
            asked = True
            continue
        yes_no = bare_answer and bool(_YES_NO.match(body)) and bool(payload.query.strip())
        # "I have!" or "I agree with you" asserts something about the speaker: a claim to judge.
        personal = bool(_PERSONAL_CLAIM.match(body)) and not _SERVICE.match(body)
        if not (yes_no or personal) and (_CHITCHAT.match(body) or _exclamation(body) or not _informative(body)):
            # A lone "yes"/"no" answering a query is an answer; elsewhere it is filler.
            continue
        note = f"answers the query: {payload.query.strip()}" if bare_answer and payload.query.strip() else None
        for part in _split_compound(body):
            claims.append(DecomposedClaim(
                id=f"c{len(claims) + 1}", source_sentence_ids=[sentence.id] if cite else [], claim=part,
                context_note=note, modality=_modality(part)))
    if refused:
        kind = "partial_refusal" if claims else "full_refusal"
    elif claims:
        kind = "answer"
    else:
        kind = "clarification_request" if asked else "no_factual_content"
    return DecomposeOutput(response_kind=kind, sub_questions=sub_questions, claims=claims)
