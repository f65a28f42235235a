"""Each task's contract is written once (veralith.llm.contract) and holds: every rule a check can break is
stated by a sentence of the task's prompt, every field of every reply schema has a row whose reader reads
it (docs/backends.md shows the table: tests/test_docs.py keeps that page current)."""

from __future__ import annotations

import importlib
import inspect
import re
import typing

import pytest
from pydantic import BaseModel

from veralith.llm import checks, rules, stale_check
from veralith.llm.contract import CONTRACTS, FAST_SECTIONS, rule_lines
from veralith.llm.prompts import system_prompt
from veralith.llm.rules import Rule
from veralith.llm.schemas import FastBareOutput
from veralith.llm.tasks import FAST, TASKS


def _paths(model: type[BaseModel], prefix: str = "") -> dict[str, bool]:
    """Every field of an output model, nested ones as "items[].evidence[].quote": whether it is a list of
    items (whose own fields are the ones that must have rows)."""
    found: dict[str, bool] = {}
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        inner = info.annotation
        is_list = typing.get_origin(inner) is list
        if is_list:
            (inner,) = typing.get_args(inner)
        nested = isinstance(inner, type) and issubclass(inner, BaseModel)
        found[path] = nested
        if nested:
            found.update(_paths(inner, f"{path}{'[]' if is_list else ''}."))
    return found


def _used_rules() -> set[str]:
    """The rules the checks can break: every `r.NAME(` (or `rules.NAME`) in their source."""
    source = inspect.getsource(checks) + inspect.getsource(stale_check)
    return set(re.findall(r"\br\.([A-Z_]+)\b", source))


def test_every_rule_a_check_can_break_is_in_a_contract_and_said_by_its_tasks_prompt():
    used = _used_rules()
    assert used and used <= {name for name, v in vars(rules).items() if isinstance(v, Rule)}
    in_tables = {rule for c in CONTRACTS.values() for rule in c.rules()}
    by_name = {name: v for name, v in vars(rules).items() if isinstance(v, Rule)}
    assert {n for n in used if by_name[n] not in in_tables} == set(), "a rule the checks use is in no contract"
    for contract in CONTRACTS.values():
        prompt = " ".join(system_prompt(contract.task).split())
        for rule in contract.rules():
            assert " ".join(rule.says.split()) in prompt, (contract.task, rule.name)
    fast = " ".join(system_prompt("fast").split())   # the single call is held to the five tasks' rules
    assert all(" ".join(line.split()) in fast for line in rule_lines("fast"))


def test_a_rule_without_its_sentence_in_the_prompt_would_fail_the_check_above():
    unsaid = Rule("unsaid", "A sentence no prompt carries.", "x", "y")
    assert unsaid.says not in system_prompt("faithfulness")


def test_the_gapless_completeness_prompt_states_no_rule_of_the_gaps_it_does_not_ask(monkeypatch):
    """A completeness call whose response states no gap is asked for no gaps (tasks.gapless): its
    "Checked" lines are those of the fields it asks, none of the gaps' own (a rule only a gap can break
    is said to the call with gaps, and not to this one)."""
    from dataclasses import replace

    from veralith.llm import contract, prompts
    from veralith.llm.contract import Contract

    gap_only = Rule("gap_only", "A gap names what it declines.", "x", "y")
    fields = tuple(replace(f, rules=(*f.rules, gap_only)) if f.path == "gaps[].sub_question_ids" else f
                   for f in CONTRACTS["completeness"].fields)
    monkeypatch.setitem(contract.CONTRACTS, "completeness", Contract("completeness", fields))
    prompts._static.cache_clear()
    try:
        gapless, with_gaps = (system_prompt("completeness", gaps=g) for g in (False, True))
        assert gap_only.says in with_gaps and gap_only.says not in gapless
        asked = {rule.says for f in fields if not f.path.startswith("gaps[]") for rule in f.rules}
        checked = gapless.split("Checked:\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert checked and {line.removeprefix("- ") for line in checked} <= asked
    finally:
        prompts._static.cache_clear()


def _reader_reads(reader: str, field: str) -> bool:
    module, _, name = reader.partition(":")
    source = inspect.getsource(getattr(importlib.import_module(module), name))
    return re.search(rf"(\.|\[\"|\"|\b){re.escape(field)}\b", source) is not None


@pytest.mark.parametrize("task", sorted(CONTRACTS))
def test_every_field_of_a_reply_has_a_row_and_its_reader_reads_it(task):
    rows = {f.path: f for f in CONTRACTS[task].fields}
    paths = _paths(TASKS[task].output_model)
    values = {p for p, nested in paths.items() if not nested}
    assert values <= set(rows), f"fields with no row: {values - set(rows)}"
    assert set(rows) <= set(paths), f"rows with no field: {set(rows) - set(paths)}"
    for path, row in rows.items():
        assert row.when and _reader_reads(row.reader, path.rsplit(".", 1)[-1].removesuffix("[]")), (path, row.reader)


def test_every_list_of_the_single_call_is_another_tasks_list():
    for model in (FAST.output_model, FastBareOutput):
        assert set(model.model_fields) <= set(FAST_SECTIONS)
        for name, (task, field) in FAST_SECTIONS.items():
            own = {p for p in _paths(TASKS[task].output_model) if not field or p.startswith(field)}
            assert own, (name, task, field)
