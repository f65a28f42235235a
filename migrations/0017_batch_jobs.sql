-- Why: `veralith eval FILE --batch` sends its judge calls through the OpenAI Batch API, whose answers
-- take minutes to hours. The job, the requests it sent and the replies it got are kept here, so the
-- process may exit and `veralith batch collect` (on any host sharing the store) finishes the job.
-- A job's traces wait under a reservation in `traces` (lease_host 'veralith-batch', token = job id).

CREATE TABLE batch_jobs (
    id TEXT PRIMARY KEY,                 -- 'job-' + random hex
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    state TEXT NOT NULL,                 -- running | done
    traces INTEGER NOT NULL DEFAULT 0,   -- traces put in the job
    judged INTEGER NOT NULL DEFAULT 0,   -- of which evaluated and stored
    settings TEXT NOT NULL DEFAULT '{}', -- judge model, decomposer model, run id (JSON; never a key)
    lease_host TEXT, lease_pid INTEGER, lease_token TEXT, lease_at REAL   -- the collector working on it
);

CREATE TABLE batch_requests (
    job TEXT NOT NULL,
    custom_id TEXT NOT NULL,             -- sha256 of the request body
    body TEXT NOT NULL,                  -- the chat-completions request (JSON)
    state TEXT NOT NULL,                 -- new | sent | done | failed
    batch_id TEXT,                       -- the OpenAI batch it was last sent in
    tries INTEGER NOT NULL DEFAULT 0,
    reply TEXT,                          -- the chat completion (JSON), once done
    error TEXT,                          -- why the last try failed
    PRIMARY KEY (job, custom_id)
);
CREATE INDEX batch_requests_state ON batch_requests (job, state);
