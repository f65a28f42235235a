-- Why: a judge reply that local models wrap in prose, or whose enum values or ids differ only in case,
-- is read leniently instead of failing the call, and the result says each time it was (the model's
-- `repairs`): the same column as SQLite's migration 0010.
ALTER TABLE traces ADD COLUMN repairs text NOT NULL DEFAULT '[]';
