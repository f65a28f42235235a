"""The Reference section of `veralith inspect`: the team's reference answer, its facts with their two
verdicts, the expected chunks and the correctness layer (a pure function of the result)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from veralith.models import Correctness, FactCorrectness, FactRecall, ReferenceAssessment

__all__ = ["reference_view"]

_LAYER_STYLE = {Correctness.correct: "green", Correctness.partly_correct: "yellow", Correctness.incorrect: "red",
                Correctness.not_assessed: "dim"}
_CAUSE = {"never_retrieved": "never retrieved (retrieval)", "retrieved_unused": "retrieved but not used (generation)",
          "stated_wrongly": "stated wrongly (generation)"}


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def reference_view(ref: ReferenceAssessment) -> RenderableType:
    from veralith.cli.render import literal

    head = Text.assemble(("correctness ", "bold"), (ref.correctness.value, _LAYER_STYLE[ref.correctness]))
    head.append(f"   context recall {_pct(ref.context_recall)}   answer correctness {_pct(ref.answer_correctness)}")
    if ref.expected:
        head.append(f"   expected chunks retrieved {_pct(ref.expected_recall)}")
    lines: list[RenderableType] = [head]
    if ref.cause:
        lines.append(Text.assemble(("first cause: ", "bold"), _CAUSE[ref.cause]))
    lines.append(literal(ref.summary, "dim"))
    if ref.error:
        lines.append(literal(ref.error, "red"))
    if ref.answer is not None:
        lines.append(Text.assemble(("reference: ", "bold"), literal(ref.answer)))
    if ref.facts:
        table = Table("fact", "context", "response", "claims", "text", box=None, pad_edge=False)
        for f in ref.facts:
            recall = "—" if f.recall is None else ("retrieved " + ", ".join(f.recall_chunk_ids)
                                                   if f.recall is FactRecall.retrieved else "not retrieved")
            said = "—" if f.correctness is None else f.correctness.value
            style = "red" if f.correctness is FactCorrectness.contradicted else ""
            table.add_row(literal(f.id, "cyan"), literal(recall), Text(said, style=style),
                          literal(", ".join(f.claim_ids) or "—", "cyan"), literal(f.text))
        lines.append(table)
    if ref.expected:
        table = Table("expected chunk", "retrieved as", "rank", box=None, pad_edge=False)
        for e in ref.expected:
            shown = e.given if len(e.given) <= 80 else e.given[:80] + "…"
            table.add_row(literal(shown), literal(e.chunk_id or "not retrieved", "cyan" if e.chunk_id else "red"),
                          "—" if e.rank is None else str(e.rank))
        lines.append(table)
    return Group(*lines)
