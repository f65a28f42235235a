"""The committed JSON Schema must match the models; removing or retyping a field needs a version bump."""

from __future__ import annotations

import json

from conftest import REPO

from veralith.models import SCHEMA_VERSION
from veralith.schema import current_schema, schema_path


def _fields(schema: dict) -> dict[str, str]:
    """Every (model.field) -> canonical JSON of its type, across $defs."""
    out = {}
    models = {"EvaluationResult": schema, **schema.get("$defs", {})}
    for name, model in models.items():
        for field, spec in model.get("properties", {}).items():
            spec = {k: v for k, v in spec.items() if k not in ("description", "title", "default")}
            out[f"{name}.{field}"] = json.dumps(spec, sort_keys=True)
    return out


def test_no_field_removed_or_retyped_without_a_version_bump():
    path = schema_path(REPO)
    assert path.exists(), f"no committed schema for version {SCHEMA_VERSION}: run `python -m veralith.schema`"
    committed, now = _fields(json.loads(path.read_text())), _fields(current_schema())
    removed = sorted(set(committed) - set(now))
    retyped = sorted(f for f in set(committed) & set(now) if committed[f] != now[f])
    assert not removed and not retyped, (
        f"fields removed {removed} or retyped {retyped} without bumping SCHEMA_VERSION ({SCHEMA_VERSION}); "
        "bump it in veralith/models.py and run `python -m veralith.schema`")


def test_committed_schema_is_current():
    assert json.loads(schema_path(REPO).read_text()) == current_schema(), \
        "docs/schema is stale: run `python -m veralith.schema`"


def test_the_check_notices_a_removed_field():
    schema = current_schema()
    del schema["$defs"]["Claim"]["properties"]["char_start"]
    assert "Claim.char_start" in set(_fields(current_schema())) - set(_fields(schema))
