-- Why: `veralith patterns` groups failing traces by the document their chunks come from. Its scans
-- of context_chunks (which documents a trace retrieved; which document a grounding link points at)
-- need only a chunk's id, position and source, but a row of context_chunks holds the chunk's text
-- too, so reading the table reads every text. This index holds just those columns: the scans read
-- it alone, and a grounding link finds its chunk by (trace_id, chunk_id).

CREATE INDEX context_chunks_document ON context_chunks (trace_id, chunk_id, position, source);
