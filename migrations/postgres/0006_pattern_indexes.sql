-- Why: as SQLite's migration 0014: `veralith patterns` reads which document each chunk comes from
-- (id, position, source) without the chunk's text, and finds a grounding link's chunk by
-- (trace_id, chunk_id); this index serves both (an index-only scan once the table is vacuumed).

CREATE INDEX context_chunks_document ON context_chunks (trace_id, chunk_id, position, source);
