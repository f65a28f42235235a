"""History: the SQLite store (schema from numbered migrations, results in and out, leases).

`load_result` is re-exported here because it is what most callers want; everything else lives in
`veralith.store.db` (connections) and `veralith.store.repository` (traces and results).
"""

from veralith.store.repository import TraceNotEvaluated, TraceNotFound, load_result

__all__ = ["TraceNotEvaluated", "TraceNotFound", "load_result"]
