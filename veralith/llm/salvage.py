"""Reading a judge's reply leniently where its meaning is unambiguous, and item by item.

Local models wrap JSON in prose or a Markdown fence, write enum values in another case ("Supported",
"yes."), echo an id in another case ("K1"), or get one item of a batch wrong. None of that should
cost the whole call:

* `extract_json` finds the JSON object in a reply: the reply itself, else the first fenced block that
  parses, else the first `{...}` in the prose that parses and has one of the expected keys; and for a
  reply cut off at the token limit, the complete items before the cut.
* `read_items` takes a judge task's items one at a time: an enum value that becomes valid once its
  case and trailing punctuation are dropped is read as that value, an id (of the item, of a chunk or
  of a sub-question) that matches exactly one given id but for case is read as that id, and each
  item is validated against its own model. Every such repair is reported, never silent.
* `settle` builds the task's output from the good items and runs the task's checks, moving each item
  a problem names out of the good set (and repeating, since a removed item can make another
  inconsistent), so what is returned passes every check and what is bad carries its problems: only
  what is wrong with it (an item that was given is never told it is missing).
* a date written in words where an ISO label is asked ("March 2022" for 2022-03) is read as that label
  when it names exactly one date.

Extraction tasks (questions, claims) have no items to keep apart; `read_whole` reads them leniently
and checks them whole.
"""

from __future__ import annotations

import json
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from veralith.llm.dates import parse_label, periods
from veralith.llm.rules import ITEM_MISSING
from veralith.llm.schemas import DERIVED
from veralith.llm.tasks import Task

__all__ = ["Key", "Reading", "Repair", "Unusable", "extract_json", "item_label", "read_items", "read_whole",
           "settle"]

Key = tuple[str, str]            # (list field, item id)
Repair = tuple[str, str]         # (kind, what was read how)

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
_PUNCTUATION = " \t\r\n.,;:!?\"'`"
_MAX_SHOWN = 60


class Unusable(Exception):
    """A reply with nothing usable in it: `problems` say why (for the re-ask)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class Reading:
    """The items of one reply: the ones that read, the bad ones with their problems, the repairs made."""

    items: dict[Key, dict[str, Any]] = field(default_factory=dict)
    bad: dict[Key, list[str]] = field(default_factory=dict)
    general: list[str] = field(default_factory=list)     # problems that belong to no expected item
    repairs: list[Repair] = field(default_factory=list)


def extract_json(content: str, keys: set[str], lists: tuple[str, ...] = ()) -> tuple[Any, list[Repair]]:
    """The JSON object in `content` (see the module doc) and how it was found; (None, []) when none."""
    text = content.strip()
    try:
        return json.loads(text), []
    except json.JSONDecodeError:
        pass
    for match in _FENCE.finditer(text):
        try:
            data = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        where = "a Markdown fence" if match.start() == 0 and match.end() == len(text) else "a fence inside prose"
        return data, [("json_in_fence", f"the JSON was read out of {where}")]
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            data, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and keys & data.keys():
            return data, [("json_in_prose", f"the JSON was read out of the prose around it ({len(text)} characters)")]
    found: dict[str, list[Any]] = {}
    for name in lists:
        items = _complete_items(text, name)
        if items:
            found[name] = items
    if found:
        n = sum(len(v) for v in found.values())
        return found, [("cut_off_reply", f"the reply was cut off; the {n} complete items before the cut were kept")]
    return None, []


def _complete_items(text: str, name: str) -> list[Any]:
    """The complete objects of the list `name` in a cut-off JSON text."""
    match = re.search(rf'"{re.escape(name)}"\s*:\s*\[', text)
    if match is None:
        return []
    decoder, position = json.JSONDecoder(), match.end()
    items: list[Any] = []
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position >= len(text) or text[position] != "{":
            return items
        try:
            item, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return items
        items.append(item)


def read_whole(task: Task, payload: BaseModel, content: str) -> tuple[BaseModel, list[Repair]]:
    """An extraction task's reply as its output model, read leniently; raise Unusable with the problems."""
    model = task.output_for(payload)
    data, repairs = extract_json(content, set(model.model_fields))
    if data is None:
        raise Unusable(["the reply is not valid JSON; send one complete JSON object"])
    try:
        output = model.model_validate(data)
    except ValidationError as exc:
        raise Unusable(_errors(exc)) from None
    problems = task.check(payload, output)
    if problems:
        raise Unusable(problems)
    return output, repairs


def read_items(task: Task, payload: BaseModel, content: str, *, only: set[Key] | None = None) -> Reading:
    """A judge task's reply item by item (see the module doc). `only`: take just these items (a re-ask).

    Raises Unusable when the reply holds no JSON object at all.
    """
    lists = tuple(spec.field for spec in task.items)
    data, repairs = extract_json(content, set(lists), lists)
    if not isinstance(data, dict):
        raise Unusable(["the reply is not a JSON object; send one complete JSON object that follows the schema"])
    reading = Reading(repairs=list(repairs))
    known = _known_ids(payload)
    for spec in task.items:
        expected = spec.expected(payload)
        by_lower = _unique_lower(expected)
        model = _item_model(task, spec.field)
        raw = data.get(spec.field, [])
        if not isinstance(raw, list):
            reading.general.append(f"'{spec.field}' must be a list of items")
            continue
        unknown = []
        given: dict[Key, dict[str, Any]] = {}   # each item as read (normalised), to tell a repeat from a change
        for item in raw:
            if not isinstance(item, dict):
                reading.general.append(f"every entry of '{spec.field}' must be an object")
                continue
            item_id = _fixed_id(item.get(spec.id_field), expected, by_lower, reading.repairs, spec.id_field)
            if item_id is None:
                unknown.append(str(item.get(spec.id_field))[:_MAX_SHOWN])
                continue
            key = (spec.field, item_id)
            if only is not None and key not in only:
                continue
            item = _normalised(task, model, {**item, spec.id_field: item_id}, known, reading.repairs, item_id)
            try:
                valid: dict[str, Any] | None = model.model_validate(item).model_dump(mode="json")
                problems: list[str] = []
            except ValidationError as exc:
                valid, problems = None, _errors(exc)
            if key in given:
                # Both sides compared in the same form: validated (derived fields set on both), else as read.
                if (valid is not None and reading.items.get(key) == valid) or given[key] == item:
                    reading.repairs.append(("duplicate_item", f"{item_label(key)} was given twice; one was kept"))
                    continue
                reading.items.pop(key, None)
                reading.bad[key] = ["it was given twice, differently; give it once"]
                continue
            given[key] = item
            if valid is not None:
                reading.items[key] = valid
            else:
                reading.bad[key] = problems
        if unknown:
            reading.general.append(f"unknown {spec.id_field} values {unknown}; use only the ids given")
    return reading


def settle(task: Task, payload: BaseModel, items: dict[Key, dict[str, Any]], bad: dict[Key, list[str]]
           ) -> tuple[BaseModel, dict[Key, list[str]]]:
    """The output built from the good `items` that passes every check, and every bad item with its problems
    (`bad` plus the items a check names, plus expected items that were not given)."""
    given = set(items) | set(bad)
    good, bad = dict(items), {k: list(v) for k, v in bad.items()}
    while True:
        output = _build(task, payload, good)
        moved = False
        for problem in task.problems(payload, output):
            for key in _keys_of(task, payload, problem.owner):
                if key in good:
                    del good[key]
                    moved = True
                elif problem.rule is ITEM_MISSING and key in given:
                    continue   # it was given, and what is wrong with it is said already: it is not missing
                if problem.text not in bad.setdefault(key, []):
                    bad[key].append(problem.text)
        if not moved:
            return output, {k: v for k, v in bad.items() if k not in good}


def item_label(key: Key) -> str:
    """How an item is named to a person or a model: 'claim k2', 'sub-question q1', 'gap g1'."""
    field_name, item_id = key
    kind = {"claims": "claim", "gaps": "gap", "sub_questions": "sub-question"}.get(field_name)
    if kind is None:
        kind = "sub-question" if item_id.lower().startswith("q") else "claim" if field_name == "items" else "item"
    return f"{kind} {item_id}"


# ---------------------------------------------------------------- helpers

def _build(task: Task, payload: BaseModel, good: dict[Key, dict[str, Any]]) -> BaseModel:
    data = {spec.field: [good[(spec.field, i)] for i in spec.expected(payload) if (spec.field, i) in good]
            for spec in task.items}
    return task.output_for(payload).model_validate(data)


def _keys_of(task: Task, payload: BaseModel, owner: str | None) -> list[Key]:
    if owner is None:
        return []
    return [(spec.field, owner) for spec in task.items if owner in spec.expected(payload)]


def _item_model(task: Task, name: str) -> type[BaseModel]:
    annotation = task.output_model.model_fields[name].annotation
    (model,) = typing.get_args(annotation)
    return typing.cast("type[BaseModel]", model)


def _unique_lower(ids: list[str]) -> dict[str, str]:
    lowered: dict[str, list[str]] = {}
    for i in ids:
        lowered.setdefault(i.lower(), []).append(i)
    return {low: same[0] for low, same in lowered.items() if len(same) == 1}


def _known_ids(payload: BaseModel) -> dict[str, str]:
    """Every id given in the input (chunks, sub-questions, claims, gaps), by its lower case, where unique."""
    ids = [item.id for name in ("chunks", "sub_questions", "claims", "gaps")
           for item in getattr(payload, name, None) or []]
    return _unique_lower(ids)


def _fixed_id(value: Any, expected: list[str], by_lower: dict[str, str], repairs: list[Repair],
              where: str) -> str | None:
    if not isinstance(value, str):
        return None
    if value in expected:
        return value
    fixed = by_lower.get(value.strip().lower())
    if fixed is not None:
        repairs.append(("id_case", f"{where} {value[:_MAX_SHOWN]!r} read as {fixed!r}"))
    return fixed


def _normalised(task: Task, model: type[BaseModel], item: dict[str, Any], known: dict[str, str],
                repairs: list[Repair], item_id: str) -> dict[str, Any]:
    out = {k: v for k, v in item.items() if k not in DERIVED}   # derived from the evidence, never taken as written
    for name, info in model.model_fields.items():
        value = out.get(name)
        allowed = typing.get_args(info.annotation) if typing.get_origin(info.annotation) is typing.Literal else ()
        if allowed and isinstance(value, str) and value not in allowed:
            candidate = value.strip(_PUNCTUATION).lower()
            if candidate in allowed:
                out[name] = candidate
                repairs.append(("enum_value", f"{task.name} {name} {value[:_MAX_SHOWN]!r} of {item_id} read as "
                                              f"{candidate!r}"))
        elif name.endswith("_ids") and isinstance(value, list):
            out[name] = [_fixed_known(v, known, repairs, f"{name} of {item_id}") for v in value]
        elif name in ("evidence", "dates") and isinstance(value, list):
            out[name] = [{**e, "chunk_id": _fixed_known(e.get("chunk_id"), known, repairs, f"{name} of {item_id}")}
                         if isinstance(e, dict) else e for e in value]
            if name == "dates":
                out[name] = [_labelled(d, repairs, item_id) for d in out[name]]
    return out


def _labelled(d: Any, repairs: list[Repair], item_id: str) -> Any:
    """A date written in words ("March 2022") read as its ISO label, when it names exactly one date."""
    if not isinstance(d, dict) or not isinstance(d.get("date"), str) or parse_label(d["date"]) is not None:
        return d
    found = periods(d["date"].strip())
    if len(found) != 1 or (found[0].at, found[0].until) != (0, len(d["date"].strip())):
        return d
    repairs.append(("date_label", f"date {d['date'][:_MAX_SHOWN]!r} of {item_id} read as {found[0].label!r}"))
    return {**d, "date": found[0].label}


def _fixed_known(value: Any, known: dict[str, str], repairs: list[Repair], where: str) -> Any:
    if not isinstance(value, str) or value in known.values():
        return value
    fixed = known.get(value.strip().lower())
    if fixed is None:
        return value
    repairs.append(("id_case", f"{where}: {value[:_MAX_SHOWN]!r} read as {fixed!r}"))
    return fixed


def _errors(exc: ValidationError) -> list[str]:
    return [f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors()[:10]]
