"""Local decomposition: the query into sub-questions, the response into claims.

Conservative by contract (DESIGN §4): a query is split only where it literally joins distinct
questions, and a response sentence is split only where it clearly states two facts. Nothing is
invented; every claim is a span of the response with boilerplate trimmed off its front.
"""

from __future__ import annotations

import re
from functools import partial

from veralith.llm.local.align import claim_of
from veralith.llm.local.lexicon import GENERIC, STOPWORDS, content_terms, stem, tokens
from veralith.llm.local.wordlists import table, words
from veralith.llm.tasks import (
    ClaimsInput,
    ClaimsOutput,
    ExtractedClaim,
    ExtractedGap,
    ExtractedRemark,
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
    """Make each piece a standalone, grammatical question: a bare question word ("..., and when?")
    asked in full from the first question, pronouns replaced by what they stand for in the first
    question, a capital and end punctuation."""
    pieces = _bare_parts(pieces)
    first = pieces[0].rstrip("?").strip()
    lead = _LEAD_WH.match(first)
    subject = lead.group(1).strip() if lead else None
    if subject and subject.split()[0].lower() in ("a", "an"):
        subject = "the " + subject.split(" ", 1)[1] if " " in subject else subject
    if subject and len(subject.split()) > _SUBJECT_WORDS:
        subject = None
    # A thing ("it", "its", "they") is the first question's subject, else the last thing it names
    # ("Which company makes the X300, and what does it cost?"); a person ("he", "his") is the subject,
    # or for "Who wrote Hamlet..." the person asked about.
    thing = subject or _last_name(first)
    person = subject or (f"the person who {first.split(' ', 1)[1]}"
                         if first.lower().startswith("who ") and len(first.split()) <= _SUBJECT_WORDS else None)
    out = []
    for i, piece in enumerate(pieces):
        if i:
            if thing:
                piece = _THING.sub(partial(_replacement, thing=thing, piece=piece), piece, count=1)
            if person:
                piece = _PERSON.sub(lambda m: person + ("'s" if m.group(1).lower() == "his" else ""), piece, count=1)
        piece = piece[0].upper() + piece[1:]
        if piece[-1] not in "?.!":
            piece += "?"
        out.append(piece)
    return out


_THING = re.compile(r"\b(it|its|they|them|their)\b", re.I)
_PERSON = re.compile(r"\b(he|him|his|she)\b", re.I)   # "her" is left: it may be an object or a possessive
_AUX_HEAD = re.compile(rf"^(?:{_AUX})\b", re.I)
_PARTICIPLES = table("past_participles")
_OF = re.compile(r"^(.*?)\s+of\s+(.+)$", re.I)


def _replacement(match: re.Match[str], thing: str, piece: str) -> str:
    """`thing` for a pronoun; for a possessive ("its freezing point"), the thing after "of" when the
    first question asked about a parallel property ("the boiling point of ethanol": ethanol's)."""
    word = match.group(1).lower()
    if word not in ("its", "their"):
        return thing
    of = _OF.match(thing)
    if of:
        owned = {w.lower() for w in re.findall(r"[\w'-]+", piece[match.end():])[:3]}
        if owned & {w.lower() for w in of.group(1).split()}:
            return of.group(2) + "'s"
    return thing + "'s"


def _last_name(question: str) -> str | None:
    """The last run of capitalised words (or codes) after the question's first word, with its "the"."""
    words = question.split()
    runs: list[list[int]] = []
    for k, word in enumerate(words[1:], 1):
        bare = word.strip(",;:'\"()")
        if bare[:1].isupper() or (bare[:1].isalpha() and any(c.isdigit() for c in bare)):
            if runs and runs[-1][-1] == k - 1:
                runs[-1].append(k)
            else:
                runs.append([k])
    if not runs:
        return None
    start, end = runs[-1][0], runs[-1][-1] + 1
    if words[start - 1].lower() == "the":
        start -= 1
    return " ".join(w.strip(",;:\"()") for w in words[start:end])


def _bare_parts(pieces: list[str]) -> list[str]:
    """Pieces with each bare question word ("When and where is the market held?", "Who founded Acme,
    and when?") asked in full from the first full question; one that cannot be asked grammatically
    stays joined to the piece before it."""
    full = [p for p in pieces if not _BARE_WH.match(p.rstrip("?").strip())]
    rest = _WH_HEAD.sub("", full[0].rstrip("?")).strip() if full else ""
    out: list[str] = []
    for piece in pieces:
        bare = piece.rstrip("?").strip()
        if not _BARE_WH.match(bare):
            out.append(piece)
            continue
        asked = _asked_in_full(bare, rest) if rest else None
        if asked:
            out.append(asked)
        elif out:
            out[-1] = f"{out[-1].rstrip('?')}, and {bare}?"
        else:
            out.append(piece)
    return out


def _asked_in_full(wh: str, rest: str) -> str | None:
    """`wh` with the rest of another question: as it stands when that begins with an auxiliary ("is the
    market held" -> "Where is the market held?"), in the passive when it begins with a past-tense verb
    ("founded Acme" -> "When was Acme founded?"); None when neither reads as English."""
    if _AUX_HEAD.match(rest):
        return f"{wh} {rest}?"
    verb, _, thing = rest.partition(" ")
    low = verb.lower()
    participle = _PARTICIPLES.get(low) or (low if low.endswith("ed") and len(low) > 3 else None)
    if not participle or not thing:
        return None
    last = thing.split()[-1].lower()
    plural = last.endswith("s") and not last.endswith(("ss", "us", "is")) and not thing[:1].isupper()
    return f"{wh} {'were' if plural else 'was'} {thing} {participle}?"


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


_ADVICE = frozenset(stem(w) for w in words("advice")) | frozenset(words("advice"))
_TO_READER = frozenset({"you", "your", "yours", "yourself", "you're", "you've", "you'll"})
_YOU = re.compile(r"\byou(?:rs?|rself|['’](?:re|ve|ll))?\b", re.I)
# The sentence's first word, past "do", "don't", "always", "never" or "just" ("Don't worry...").
_OPENER = re.compile(r"^\W*(?:(?:do|don['’]t|always|never|just)\s+)?([^\W\d_]+)", re.I)


def _advice(text: str, query: str) -> bool:
    """Generic advice or encouragement to the reader: addressed to them ("you", or an advice verb
    first: "Find what works best for you and stick with it", "Take your time"), every content word
    an advice, generic or function word, no figure or name, and no word of the question (so an
    instruction that answers "how do I..." stays a claim)."""
    opening = _OPENER.match(text)
    if not opening or not (_YOU.search(text) or opening.group(1).lower() in _ADVICE
                           or stem(opening.group(1).lower()) in _ADVICE):
        return False
    if any(t.is_number or t.is_capital for t in tokens(text)):
        return False
    asked = {t.norm for t in content_terms(query)}
    for t in content_terms(text):
        low = t.text.lower()
        if t.norm in asked or not (low in _ADVICE or t.norm in _ADVICE or low in GENERIC or low in _TO_READER):
            return False
    return True


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
    remarks: list[ExtractedRemark] = []
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
        # A response that is only a figure in words ("Twelve.") answers the question it was given for.
        # (One in digits alone, "1,200", is no claim by the task's contract: a claim has words.)
        figure = bare_answer and bool(payload.query.strip()) and any(t.is_number and t.text[0].isalpha()
                                                                     for t in tokens(body))
        # "I have!" or "I agree with you" asserts something about the speaker: a claim to judge.
        personal = bool(_PERSONAL_CLAIM.match(body)) and not _SERVICE.match(body)
        service = bool(_SERVICE.match(body)) and ":" not in body  # "I can help you with that!"
        talk = service or bool(_CHITCHAT.match(body)) or _exclamation(body) or _advice(body, payload.query)
        if not (yes_no or personal or figure) and (talk or not _informative(body)):
            # A lone "yes"/"no" answering a query is an answer; elsewhere it is filler. Talk to the
            # user (an offer to help, encouragement, generic advice) is kept and shown as a remark.
            if talk:
                remarks.append(ExtractedRemark(id=f"r{len(remarks) + 1}", source_sentence_ids=ids,
                                               text=sentence.text.strip()))
            continue
        note = f"answers the query: {payload.query.strip()}" if bare_answer and payload.query.strip() else ""
        said = opening.group(1).lower() if opening else reply
        if not note and said and payload.query.strip():
            # "Yes, dogs are welcome..." replies to a yes/no question; the reply word is trimmed, so say so.
            note = f"replies {said} to: {payload.query.strip()}"
        reply = ""
        for part in _split_compound(body):
            found.append(ExtractedClaim(id=f"c{len(found) + 1}", source_sentence_ids=ids, text=part, note=note))
    return ClaimsOutput(claims=found, gaps=gaps, remarks=remarks,
                        asks_clarification=asked and not found and not gaps)
