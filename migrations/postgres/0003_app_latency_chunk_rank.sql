-- Why: RAG engineers look first at what the retriever ranked and scored, and at how long their own
-- app took: the same columns as SQLite's migration 0011 (rank and score per chunk; the app's total,
-- retrieval and generation time per trace), and the index `veralith stats` reads percentiles through.
ALTER TABLE context_chunks ADD COLUMN rank integer;
ALTER TABLE context_chunks ADD COLUMN score double precision;
ALTER TABLE traces ADD COLUMN app_latency_ms double precision;
ALTER TABLE traces ADD COLUMN app_retrieval_ms double precision;
ALTER TABLE traces ADD COLUMN app_generation_ms double precision;
CREATE INDEX traces_app_latency ON traces (knowledge_base, app_latency_ms) WHERE app_latency_ms IS NOT NULL;
