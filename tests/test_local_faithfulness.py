"""The local faithfulness judge on hand-written cases: swaps in copied sentences are caught and
quoted, paraphrases pass, support may span two chunks, and every output keeps the contract.

Runs veralith.llm.local.grounding.faithfulness directly (no pipeline, no data folder, no network).
"""

from __future__ import annotations

import re

import pytest

from veralith.llm.local.grounding import FEATURES, claim_features, faithfulness
from veralith.llm.tasks import ChunkIn, ClaimIn, FaithfulnessInput

KETTLE = "You can buy the Halvard kettle for 64 dollars at the Brindle market."
LIBRARY = "The Corran library is not open on Sundays."
BAKERY = "Mira Solberg opened the bakery in Tromsdal in 2004."
VESKA = "The Veska 2 drone weighs 3 kilograms and flies for 40 minutes."
FESTIVAL = "The lantern festival starts on 12 March every year."
TRAILS = "The northern trail is longer than the river trail."
SALES = "Sales at Pellow Foods increased after the new packaging was introduced."
BRIDGE = "The old bridge was finished before the railway station opened."
FERRY = "The Ostby ferry carries twenty cars on each crossing."
STAFF = "The bakery employs 14 bakers and two drivers."


def judge(claims: list[str], chunks: list[str], query: str = ""):
    payload = FaithfulnessInput(query=query, claims=[ClaimIn(id=f"c{i + 1}", text=t) for i, t in enumerate(claims)],
                                chunks=[ChunkIn(id=f"k{i + 1}", text=t) for i, t in enumerate(chunks)])
    output, confidence = faithfulness(payload)
    _check_contract(payload, output, confidence)
    return output.items, confidence


def _collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _check_contract(payload, output, confidence) -> None:
    chunks = {c.id: c.text for c in payload.chunks}
    assert [i.claim_id for i in output.items] == [c.id for c in payload.claims]
    assert set(confidence) == {c.id for c in payload.claims}
    for item in output.items:
        assert 0.0 <= confidence[item.claim_id] <= 1.0
        for ev in item.evidence:
            assert _collapse(ev.quote) in _collapse(chunks[ev.chunk_id]), ev.quote
            assert "…" not in ev.quote
        if item.relation in ("supported", "conflicting"):
            assert item.grounding_chunk_ids
        if item.relation in ("contradicted", "conflicting"):
            assert item.contradicting_chunk_ids
        if item.relation in ("unsupported", "contradicted"):
            assert not item.grounding_chunk_ids
        if item.relation in ("unsupported", "supported"):
            assert not item.contradicting_chunk_ids


CONTRADICTIONS = [
    # (context sentence, claim, a word of the context that the quoted evidence must show)
    pytest.param(KETTLE, "You can buy the Halvard kettle for 72 dollars at the Brindle market.", "64", id="number"),
    pytest.param(KETTLE, "You can buy the Halvard kettle for $72 at the Brindle market.", "64", id="number-currency"),
    pytest.param(LIBRARY, "The Corran library is open on Sundays.", "not", id="negation"),
    pytest.param("The Corran library is open on Sundays.", "The Corran library is never open on Sundays.", "open",
                 id="negation-never"),
    pytest.param("The Corran library still lends maps.", "The Corran library no longer lends maps.", "still",
                 id="negation-no-longer"),
    pytest.param(VESKA, "The Veska 5 drone weighs 3 kilograms and flies for 40 minutes.", "Veska 2", id="model-number"),
    pytest.param(BAKERY, "Mira Solberg opened the bakery in Elmsford in 2004.", "Tromsdal", id="city"),
    pytest.param(BAKERY, "Anton Reyes opened the bakery in Tromsdal in 2004.", "Mira", id="person"),
    pytest.param(BAKERY, "Mira Solberg opened the bakery in Tromsdal in 2009.", "2004", id="year"),
    pytest.param(FESTIVAL, "The lantern festival starts on 12 June every year.", "March", id="month"),
    pytest.param(FESTIVAL, "The lantern festival starts on 19 March every year.", "12", id="day"),
    pytest.param(FESTIVAL, "The lantern festival starts on 12 May every year.", "March", id="month-may"),
    pytest.param(TRAILS, "The northern trail is shorter than the river trail.", "longer", id="comparison"),
    pytest.param(SALES, "Sales at Pellow Foods decreased after the new packaging was introduced.", "increased",
                 id="direction"),
    pytest.param(BRIDGE, "The old bridge was finished after the railway station opened.", "before", id="before-after"),
    pytest.param(LIBRARY, "The Corran library is not closed on Sundays.", "open", id="negated-opposite-negated"),
]


@pytest.mark.parametrize("context, claim, shown", CONTRADICTIONS)
def test_a_swap_in_a_copied_sentence_is_contradicted_and_quoted(context: str, claim: str, shown: str) -> None:
    filler = "The harbour museum has a small cafe on the ground floor."
    items, confidence = judge([claim], [filler, context])
    item = items[0]
    assert item.relation == "contradicted", item.reasoning
    assert item.contradicting_chunk_ids == ["k2"]
    assert any(shown in ev.quote and ev.chunk_id == "k2" for ev in item.evidence)
    assert 0.5 < confidence["c1"] <= 1.0  # at least the contradiction rule's measured precision


PARAPHRASES = [
    pytest.param(BAKERY, "In 2004, the bakery in Tromsdal was opened by Mira Solberg.", id="reordered"),
    pytest.param(BAKERY, "Mira Solberg opens a bakery in Tromsdal in 2004.", id="inflected"),
    pytest.param(KETTLE, "The Halvard kettle can be purchased at the Brindle market for 64 dollars.", id="synonym"),
    pytest.param(KETTLE, "At the Brindle market, the Halvard kettle costs $64.", id="currency-symbol"),
    pytest.param(FERRY, "The Ostby ferry carries 20 vehicles on each crossing.", id="number-as-word"),
    pytest.param(FESTIVAL, "Every year the lantern festival begins on March 12.", id="date-order-synonym"),
    pytest.param(LIBRARY, "The Corran library is not open on Sunday.", id="negation-kept"),
    pytest.param(LIBRARY, "The Corran library is closed on Sundays.", id="negated-opposite"),
    pytest.param(TRAILS, "The northern trail is longer than the river trail.", id="verbatim"),
]


@pytest.mark.parametrize("context, claim", PARAPHRASES)
def test_a_paraphrase_is_supported(context: str, claim: str) -> None:
    filler = "The harbour museum has a small cafe on the ground floor."
    items, confidence = judge([claim], [context, filler])
    item = items[0]
    assert item.relation == "supported", item.reasoning
    assert item.grounding_chunk_ids == ["k1"]
    assert confidence["c1"] > 0.5


def test_a_claim_needing_two_chunks_is_supported_with_both() -> None:
    items, _ = judge(["Mira Solberg opened the bakery in Tromsdal in 2004 and it employs 14 bakers."],
                     [BAKERY, "The harbour museum has a small cafe on the ground floor.", STAFF])
    assert items[0].relation == "supported", items[0].reasoning
    assert sorted(items[0].grounding_chunk_ids) == ["k1", "k3"]
    assert {ev.chunk_id for ev in items[0].evidence} == {"k1", "k3"}


def test_a_claim_two_chunks_disagree_on_is_conflicting() -> None:
    items, _ = judge(["Mira Solberg opened the bakery in Tromsdal in 2004."],
                     [BAKERY, "Mira Solberg opened the bakery in Tromsdal in 2007."])
    assert items[0].relation == "conflicting"
    assert items[0].grounding_chunk_ids == ["k1"]
    assert items[0].contradicting_chunk_ids == ["k2"]


@pytest.mark.parametrize("claim", [
    "The Orbitra 4 costs 189 euros.",           # a name the context never mentions
    "The bakery in Tromsdal sells 350 loaves a day.",  # a figure the context never gives
])
def test_a_name_or_number_found_nowhere_is_never_supported(claim: str) -> None:
    items, confidence = judge([claim], [BAKERY, "The Orbitra 3 costs 189 euros in the Skylark shop."])
    assert items[0].relation in ("unsupported", "contradicted")
    assert not items[0].grounding_chunk_ids


def test_a_claim_about_something_else_is_unsupported_with_a_confidence() -> None:
    items, confidence = judge(["The river trail is lit by solar lamps at night."], [BAKERY, FESTIVAL])
    assert items[0].relation == "unsupported"
    assert confidence["c1"] > 0.5


def test_empty_context_is_unsupported() -> None:
    items, confidence = judge(["The Halvard kettle costs 64 dollars."], [])
    assert items[0].relation == "unsupported"
    assert confidence["c1"] == 1.0


def test_quotes_are_verbatim_even_for_long_and_glued_sentences() -> None:
    long_sentence = ("The Brindle market, which opens at dawn on weekdays and at nine on weekends, sells kettles, "
                     "lamps, rope, lanterns, woollen blankets, tin cups, fishing hooks, brass bells, candles and "
                     "maps of the coast, and it keeps a stall for travelling bakers who bring bread from Tromsdal "
                     "and cakes from the villages further up the valley every Saturday morning.")
    glued = "The ferry leaves at noon.Tickets cost 9 dollars   at the\n pier."
    claims = ["The Brindle market sells brass bells and woollen blankets.", "Tickets for the ferry cost 9 dollars.",
              "Tickets for the ferry cost 12 dollars at the pier."]
    items, _ = judge(claims, [long_sentence, glued])
    assert items[0].relation == "supported"
    assert len(items[0].evidence[0].quote) <= 300
    assert items[1].relation == "supported"
    assert items[2].relation == "contradicted"


def test_bare_answer_to_a_question() -> None:
    chunks = ["Acme was founded by Ruth Calder in 1947 in the port town of Velm."]
    items, _ = judge(["1947"], chunks, query="When was Acme founded?")
    assert items[0].relation == "supported"
    items, _ = judge(["1952"], chunks, query="When was Acme founded?")
    assert items[0].relation == "contradicted"
    items, _ = judge(["Ruth Calder"], chunks, query="Who founded Acme?")
    assert items[0].relation == "supported"


def test_features_are_the_models_inputs_and_deterministic() -> None:
    claim = ClaimIn(id="c1", text="Mira Solberg opened the bakery in 2004.")
    first = claim_features(claim, "", [BAKERY, STAFF])
    assert list(first) == FEATURES or set(first) == set(FEATURES)
    assert first == claim_features(claim, "", [BAKERY, STAFF])
    assert all(isinstance(v, float) for v in first.values())


def test_a_list_of_names_is_checked_name_by_name() -> None:
    # Commas end a name: the claim's list adds a first name to one player, which is no swap; a
    # different player in the same list still is.
    context = "Late goals from Ella Brandt, Moss, Kai Larsen and Tom Reyes sealed the Harriers' win."
    items, _ = judge(["The Harriers' win was sealed by late goals from Ella Brandt, Ian Moss, Kai Larsen and Tom Reyes."],
                     [context])
    assert items[0].relation != "contradicted", items[0].reasoning
    items, _ = judge(["The Harriers' win was sealed by late goals from Ella Brandt, Moss, Kai Larsen and Tom Vance."],
                     [context])
    assert items[0].relation == "contradicted", items[0].reasoning


def test_a_rank_is_not_a_count() -> None:
    # "first" ranks; "28" counts days: they fill no common slot. A rank against a rank still clashes.
    context = "Harbour Lights is a 1972 drama directed by Ada Lunn, which premiered on 28 November 1972."
    items, _ = judge(["The first film is a 1972 drama directed by Ada Lunn."], [context])
    assert items[0].relation != "contradicted", items[0].reasoning
    items, _ = judge(["The Vell bridge is the second longest bridge in Norway."],
                     ["The Vell bridge is the third longest bridge in Norway."])
    assert items[0].relation == "contradicted", items[0].reasoning


def test_a_claim_using_both_directions_of_a_pair_has_no_direction_to_swap() -> None:
    context = "More than 600 firefighters were sent to the blaze and the fire is now under control."
    items, _ = judge(["The fire was brought under control by over 600 firefighters."], [context])
    assert items[0].relation != "contradicted", items[0].reasoning


def test_a_name_differing_only_in_a_figure_after_it_is_no_name_swap() -> None:
    context = "Mara Quint is a stage actor. She narrated the revival of Blue Orchard (2019) at the Lyric."
    items, _ = judge(["Mara Quint narrated the revival of Blue Orchard at the Lyric."], [context])
    assert items[0].relation != "contradicted", items[0].reasoning


def test_a_number_that_points_into_the_answers_layout_is_no_figure() -> None:
    # "Passage 3", "step 2": the response numbering its sources or its steps states no figure.
    chunks = ["The museum opens at nine every morning."]
    for claim in ("Passage 3 says the museum opens at nine.", "Step 2: the museum opens at nine.",
                  "Sources 1 and 4 say the museum opens at nine."):
        assert claim_features(ClaimIn(id="c1", text=claim), "", chunks)["num_absent"] == 0.0, claim
    items, _ = judge(["Passage 3 says the museum opens at nine."], chunks)
    assert items[0].relation == "supported", items[0].reasoning
    # A real figure found nowhere is still never supported.
    assert claim_features(ClaimIn(id="c1", text="The museum opens at 9:30."), "", chunks)["num_absent"] == 1.0
    items, _ = judge(["The museum opens at 9:30."], chunks)
    assert items[0].relation != "supported"


# A claim is contradicted only by a sentence about the same thing. When its chunk states the claim's
# names and figures elsewhere, with more of the claim's words, the claim was aligned to the wrong
# slot (a list, two works with one title, two events of one article), and no clash is declared.
ALIGNMENT = [
    # two works of one title, each with its year and its cast
    (["Harbour Lights is a 1972 radio play by Ada Lunn, starring Ivo Brandt, Nell Okafor and Rhea Stamm.",
      "Harbour Lights (1995 film). The film stars Lise Varn, Oren Hale, Pia Dunne and Cato Wilde."],
     "The 1995 film Harbour Lights stars Lise Varn, Oren Hale, Pia Dunne and Cato Wilde."),
    # one sentence joining two statements, each with its own figure
    (["Some Kestrel routers use 10.0.0.1 as their address, and some Marlin and Sorell routers use 10.0.0.138."],
     "Marlin and Sorell routers use 10.0.0.138."),
    # a list that goes on in the next sentence
    (["Former winner Amy Roe is among two French writers and a Dane on this year's Pellan shortlist. "
      "Also on the list are Paul Dern, Ida Falk, Jon Ruiz and Vera Sand."],
     "The Pellan shortlist includes Amy Roe, Paul Dern, Ida Falk, Jon Ruiz and Vera Sand."),
]


@pytest.mark.parametrize(("chunks", "claim"), ALIGNMENT)
def test_a_claim_stated_elsewhere_in_its_chunk_is_not_contradicted_by_a_neighbour(chunks: list[str],
                                                                                 claim: str) -> None:
    items, _ = judge([claim], [" ".join(chunks)])
    assert items[0].relation != "contradicted", items[0].reasoning


def test_a_sentence_naming_only_the_subject_does_not_excuse_a_swap() -> None:
    # The claim's year does stand elsewhere, but beside its subject only, not its predicate: the
    # sentence about winning the cup is the one the claim is about, and it gives another year.
    context = ("The Colts made Dan Roe of Ulm their first pick in 1953. "
               "He played for Ulm and won the Ferris Cup in 1952.")
    items, _ = judge(["Dan Roe won the Ferris Cup in 1953."], [context])
    assert items[0].relation == "contradicted", items[0].reasoning
    assert "1952" in items[0].reasoning


def test_two_chunks_that_disagree_still_conflict() -> None:
    # Support for the claim's figure in another document is a conflict, not a misalignment.
    chunks = ["Applications for the Tessel grant close on 14 October.",
              "Update: applications for the Tessel grant now close on 28 October."]
    items, _ = judge(["Applications for the Tessel grant close on 28 October."], chunks)
    assert items[0].relation == "conflicting", items[0].reasoning


COMPARED = ("Kestrel stoves compared. The Kestrel 2 weighs 1.9 kg and boils a litre in 4 minutes. "
            "The Kestrel 3 weighs 2.4 kg and boils a litre in 3 minutes.")


@pytest.mark.parametrize(("claim", "query", "contradicted"), [
    ("The Kestrel 3 is the lighter of the two stoves.", "Which is lighter, the Kestrel 2 or the Kestrel 3?", True),
    ("The Kestrel 2 is the lighter of the two stoves.", "Which is lighter, the Kestrel 2 or the Kestrel 3?", False),
    ("The Kestrel 3 is lighter than the Kestrel 2.", "", True),
    ("The Kestrel 3 is heavier than the Kestrel 2.", "", False),
    # No name before the comparative: the claim's own figure stands for what it describes.
    ("It weighs 2.4 kg, which makes it lighter than the Kestrel 2.", "", True),
    ("It weighs 2.4 kg, which makes it heavier than the Kestrel 2.", "", False),
])
def test_a_comparison_the_stated_figures_reverse_is_contradicted(claim: str, query: str, contradicted: bool) -> None:
    items, _ = judge([claim], [COMPARED], query=query)
    assert (items[0].relation == "contradicted") is contradicted, items[0].reasoning
    if contradicted:
        assert "1.9" in items[0].reasoning and "wrong way round" in items[0].reasoning


def test_a_comparison_without_figures_in_one_unit_is_left_to_the_model() -> None:
    # Minutes against kilograms settle nothing; neither does a thing the context gives no figure for.
    items, _ = judge(["The Kestrel 3 is lighter than the Kestrel 5."], [COMPARED])
    assert items[0].relation != "contradicted", items[0].reasoning


def test_a_name_that_is_also_a_function_word_matches_itself() -> None:
    # "May" in "Jonny May" is a stopword as a word, a name as written: the same name in both is no swap.
    context = "But late tries from Jonny May, Marshall, Kai Larsen and Tom Reyes sealed the Harriers' win."
    items, _ = judge(["The Harriers' win was sealed by late tries from Jonny May, Marshall, Kai Larsen and Tom Reyes."],
                     [context])
    assert items[0].relation == "supported", items[0].reasoning
    items, _ = judge(["The Harriers' win was sealed by late tries from Jonny May, Ian Marshall, Kai Larsen and Tom Reyes."],
                     [context])
    assert "jonny may" not in items[0].reasoning.lower(), items[0].reasoning


def test_a_negated_opposite_elsewhere_in_the_chunk_outweighs_a_clash_with_the_named_sentence() -> None:
    # The sentence that names the gallery gives other days; the one about Mondays says "not open"
    # of "the gallery". "Closed on Mondays" is that second statement, not a clash with the first.
    chunk = ("The Ardley Gallery is open Tuesday to Sunday from 10:00 to 18:00. "
             "The gallery is not open on Mondays. Admission is free.")
    items, _ = judge(["The Ardley Gallery is closed on Mondays."], [chunk])
    # (Supported or not is then the model's call on coverage split over two sentences; what the
    # rule settles is that nothing contradicts the claim and "closed" counts as found.)
    assert items[0].relation != "contradicted", items[0].reasoning
    assert "100%" in items[0].reasoning and "not found" not in items[0].reasoning, items[0].reasoning
    items, _ = judge(["The Ardley Gallery is open on Mondays."], [chunk])
    assert items[0].relation == "contradicted", items[0].reasoning
