-- Why: RAG engineers look first at what the retriever ranked and scored, and at how long their own
-- app took; neither was kept. A chunk now carries the rank and score its retriever (or reranker)
-- gave it, and a trace the app's own duration (given to `log(latency_ms=...)`, measured by `@trace`
-- and the adapters), with the retrieval and generation parts where the app's framework tells them
-- apart. `veralith stats` reads p50/p95 of the total per knowledge base through the index below.

ALTER TABLE context_chunks ADD COLUMN rank INTEGER;  -- position in the retriever's results (1 = first); NULL when not given
ALTER TABLE context_chunks ADD COLUMN score REAL;    -- the retriever's or reranker's score, as it gave it; NULL when not given

ALTER TABLE traces ADD COLUMN app_latency_ms REAL;     -- the app's own duration of the call, in ms (NULL: not recorded)
ALTER TABLE traces ADD COLUMN app_retrieval_ms REAL;   -- of which retrieving, where the framework tells it apart
ALTER TABLE traces ADD COLUMN app_generation_ms REAL;  -- of which generating (time in model calls)

-- Percentiles per knowledge base walk this index from one end: no table scan, no sort.
CREATE INDEX traces_app_latency ON traces (knowledge_base, app_latency_ms) WHERE app_latency_ms IS NOT NULL;
