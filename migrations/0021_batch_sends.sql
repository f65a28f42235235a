-- Why: a batch of `veralith eval --batch` is recorded before it is created, so a collector that
-- takes over after a crash (between creating a batch and learning its id) finds it on the service,
-- by the idempotency key in its metadata, instead of sending and paying for its requests again.
-- One row per batch a job sends (one model, within the service's size limits): its key, its input
-- file and batch once known, the service's last status, and why it failed (`batch.errors`).

CREATE TABLE batch_sends (
    key TEXT PRIMARY KEY,                -- idempotency key; the batch's metadata `veralith_send`
    job TEXT NOT NULL,
    model TEXT NOT NULL,                 -- the one model of its requests
    requests INTEGER NOT NULL,
    bytes INTEGER NOT NULL,              -- size of its input file
    recorded_at REAL NOT NULL,           -- unix time (the database's clock) it was recorded
    state TEXT NOT NULL,                 -- recorded (not known to be created) | sent | read
    file_id TEXT,                        -- the uploaded input file, once uploaded
    batch_id TEXT,                       -- the batch, once created or found on the service
    status TEXT,                         -- the service's last status of it
    error TEXT                           -- why it failed or what was lost (the service's words)
);
CREATE INDEX batch_sends_job ON batch_sends (job, state);

ALTER TABLE batch_requests ADD COLUMN send_key TEXT;   -- the send that holds it while it is out

-- Batches already out when this runs: one send each, so they are read as before.
INSERT INTO batch_sends (key, job, model, requests, bytes, recorded_at, state, batch_id)
    SELECT 'sent-' || batch_id, job, '', COUNT(*), 0, 0, 'sent', batch_id FROM batch_requests
    WHERE state = 'sent' AND batch_id IS NOT NULL GROUP BY job, batch_id;
UPDATE batch_requests SET send_key = 'sent-' || batch_id WHERE state = 'sent' AND batch_id IS NOT NULL;
