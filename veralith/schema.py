"""Generate the committed JSON Schema of EvaluationResult: `python -m veralith.schema`.

The file is named after SCHEMA_VERSION, so a consumer can pin a version; tests/test_schema.py fails
when a field is removed or retyped without bumping the version.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from veralith.models import SCHEMA_VERSION, EvaluationResult

__all__ = ["current_schema", "schema_path"]


def current_schema() -> dict:
    schema = EvaluationResult.model_json_schema(mode="serialization")
    schema["$id"] = f"https://veralith.dev/schema/evaluation_result-{SCHEMA_VERSION}.json"
    return schema


def schema_path(root: Path) -> Path:
    return root / "docs" / "schema" / f"evaluation_result-{SCHEMA_VERSION}.json"


def main(argv: list[str] | None = None) -> int:
    root = Path(argv[0]) if argv else Path.cwd()
    path = schema_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current_schema(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
