"""`veralith inspect`: the response with each claim marked in place, the legend, trace metadata, as text."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner
from work_support import save_result

from veralith.cli import app, render
from veralith.models import (
    Availability,
    Claim,
    ContextChunk,
    EvaluationResult,
    Execution,
    FaithfulnessJudgment,
    Gap,
    Gate,
    Relation,
    Status,
    Verdict,
)

RESPONSE = "The X200 has a two-year warranty. It also covers drops. Shipping is free."


def _judged(claim_id: str, relation: Relation) -> FaithfulnessJudgment:
    return FaithfulnessJudgment(claim_id=claim_id, verdict=Verdict.Y if relation is Relation.supported else Verdict.N,
                                relation=relation, reasoning="r")


def _result(response: str = RESPONSE, claims: list[Claim] | None = None,
            faithfulness: list[FaithfulnessJudgment] | None = None, **changes) -> EvaluationResult:
    if claims is None:
        claims = [Claim(id="k1", text="The X200 has a two-year warranty.", char_start=0, char_end=32),
                  Claim(id="k2", text="It also covers drops.", char_start=34, char_end=54),
                  Claim(id="k3", text="Shipping is free.", char_start=56, char_end=72)]
    if faithfulness is None:
        faithfulness = [_judged("k1", Relation.supported), _judged("k2", Relation.unsupported),
                        _judged("k3", Relation.contradicted)]
    fields = dict(
        trace_id=3, query="What is the X200's warranty?", response=response,
        context=[ContextChunk(id="c0", text="The X200 comes with a two-year warranty.")],
        claims=claims, faithfulness=faithfulness,
        status=Status(execution=Execution.success, availability=Availability.assessed, quality_gate=Gate.fail,
                      reason="r", summary="s"),
        backend="local", judge_model="local-heuristics")
    return EvaluationResult(**{**fields, **changes})


def _plain(renderable, width: int = 200) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def _styled(text) -> dict[str, set[str]]:
    """Which characters of a rich Text carry which style, as {style: {substring, ...}}."""
    out: dict[str, set[str]] = {}
    for span in text.spans:
        out.setdefault(str(span.style), set()).add(text.plain[span.start:span.end])
    return out


def test_each_claim_is_tagged_after_its_sentence_and_coloured_by_verdict():
    shown = render._response(_result())
    assert shown.plain == ("The X200 has a two-year warranty. [k1 ✓] It also covers drops. [k2 ✗] "
                           "Shipping is free. [k3 ⊘]")
    styles = _styled(shown)
    assert "The X200 has a two-year warranty" in styles["green"]
    assert "It also covers drops" in styles["yellow"]
    assert "Shipping is free" in styles["bold red"]


def test_legend_names_every_mark_and_the_claims_that_could_not_be_placed():
    result = _result(claims=[Claim(id="k1", text="The X200 has a two-year warranty.", char_start=0, char_end=32),
                             Claim(id="k2", text="reworded", char_start=None, char_end=None),
                             Claim(id="k3", text="out of range", char_start=70, char_end=500)],
                     faithfulness=[_judged("k1", Relation.supported)],
                     gaps=[Gap(id="g1", text="Shipping is free.", char_start=56, char_end=73)])
    legend = _plain(render._legend(result))
    for needle in ("✓ grounded (a chunk supports it)", "✗ unsupported (no chunk supports it)",
                   "⊘ contradicted (a chunk says otherwise)", "≠ conflicting", "? not judged", "gap"):
        assert needle in legend, needle
    assert "not located in the response (reworded by the judge): k2, k3" in legend
    response = render._response(result).plain
    assert "[k1 ✓]" in response and "[g1 gap]" in response and "k2" not in response and "k3" not in response


def test_overlapping_claims_take_the_worst_colour_and_share_one_tag():
    claims = [Claim(id="k1", text="a", char_start=0, char_end=32), Claim(id="k2", text="b", char_start=4, char_end=32)]
    shown = render._response(_result(claims=claims, faithfulness=[_judged("k1", Relation.supported),
                                                                  _judged("k2", Relation.contradicted)]))
    assert shown.plain.startswith("The X200 has a two-year warranty. [k1 ✓ k2 ⊘] It also")
    styles = _styled(shown)
    assert "The " in styles["green"] and "X200 has a two-year warranty" in styles["bold red"]


def test_hostile_response_is_escaped_and_spans_still_mark_the_right_words():
    hostile = "Ok [red]x[/red]\x1b[2J. Bad \u202eclaim."
    bad_start = hostile.index("Bad")
    result = _result(response=hostile, claims=[Claim(id="k1", text="Ok", char_start=0, char_end=bad_start - 2),
                                               Claim(id="k2", text="Bad claim.", char_start=bad_start,
                                                     char_end=len(hostile) - 1)],
                     faithfulness=[_judged("k1", Relation.supported), _judged("k2", Relation.contradicted)])
    shown = render._response(result)
    assert shown.plain == "Ok [red]x[/red]\\x1b[2J. [k1 ✓] Bad \\u202eclaim. [k2 ⊘]"
    styles = _styled(shown)
    assert "Ok [red]x[/red]\\x1b[2J" in styles["green"] and "Bad \\u202eclaim" in styles["bold red"]
    console = Console(file=io.StringIO(), width=200, force_terminal=True, color_system="truecolor")
    console.print(render.result_view(result))
    out = console.file.getvalue()
    assert "[red]x[/red]" in out and "\x1b[2J" not in out and "\u202e" not in out


def test_metadata_is_shown_compactly_known_keys_first():
    metadata = {"zeta": [1, 2], "user_id": "u-42", "chain": "RetrievalQA", "run_id": "run-7",
                "note": "[bold]x[/bold] " + "long " * 40}
    out = _plain(render.result_view(_result(metadata=metadata)))
    line = next(line for line in out.splitlines() if line.startswith("metadata"))
    assert line.index("run_id=run-7") < line.index("chain=RetrievalQA") < line.index("user_id=u-42")
    assert line.index("user_id=u-42") < line.index("note=") < line.index("zeta=[1, 2]")
    assert "note=[bold]x[/bold] long" in line and "…" in line and len(line) < 200
    many = _plain(render.result_view(_result(metadata={f"k{i:02}": i for i in range(20)})))
    assert "… 8 more (see --json)" in many
    assert "metadata" not in _plain(render.result_view(_result()))


def test_inspect_command_shows_the_marked_response_metadata_and_creation_time(store):
    trace_id = save_result(store, _result(trace_id=None, metadata={"run_id": "r1", "user_id": "u1"}))
    shown = CliRunner(env={"COLUMNS": "100"}).invoke(app, ["inspect", str(trace_id)])
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "It also covers drops. [k2 ✗] Shipping is free. [k3 ⊘]" in out
    assert "⊘ contradicted (a chunk says otherwise)" in " ".join(out.split())
    assert "metadata  run_id=r1  user_id=u1" in out
    assert re.search(r"created \d{4}-\d\d-\d\d \d\d:\d\d UTC", out)


@pytest.mark.parametrize("width", [80, 120])
def test_inspect_screen_fits_the_terminal(width):
    lines = _plain(render.result_view(_result(metadata={"chain": "x" * 300})), width=width).splitlines()
    assert max(len(line) for line in lines) <= width


def test_header_names_the_run_when_the_caller_knows_it():
    head = _plain(render.result_view(_result(), created_at="2026-03-10T14:00:00+02:00", run="#3 [b]main[/b]"))
    assert head.splitlines()[0] == "Trace 3  kb default  run #3 [b]main[/b]  created 2026-03-10 12:00 UTC"


def test_header_shows_your_own_id_once():
    out = _plain(render.result_view(_result(metadata={"id": "fin-002", "user_id": "u1"}), external_id="fin-002"))
    assert out.splitlines()[0].startswith("Trace 3 (fin-002)  kb default")
    assert "metadata  user_id=u1" in out and "id=fin-002" not in out
