-- Why: a batch of `veralith eval --batch` is recorded before it is created, so a collector that
-- takes over after a crash (between creating a batch and learning its id) finds it on the service,
-- by the idempotency key in its metadata, instead of sending and paying for its requests again.
-- The same change as SQLite's migration of the same name.

CREATE TABLE batch_sends (
    key TEXT PRIMARY KEY,
    job TEXT NOT NULL,
    model TEXT NOT NULL,
    requests bigint NOT NULL,
    bytes bigint NOT NULL,
    recorded_at double precision NOT NULL,
    state TEXT NOT NULL,
    file_id TEXT,
    batch_id TEXT,
    status TEXT,
    error TEXT
);
CREATE INDEX batch_sends_job ON batch_sends (job, state);

ALTER TABLE batch_requests ADD COLUMN send_key TEXT;

INSERT INTO batch_sends (key, job, model, requests, bytes, recorded_at, state, batch_id)
    SELECT 'sent-' || batch_id, job, '', COUNT(*), 0, 0, 'sent', batch_id FROM batch_requests
    WHERE state = 'sent' AND batch_id IS NOT NULL GROUP BY job, batch_id;
UPDATE batch_requests SET send_key = 'sent-' || batch_id WHERE state = 'sent' AND batch_id IS NOT NULL;
