-- Why: a judge reply that local models wrap in prose, or whose enum values or ids differ only in case,
-- is read leniently instead of failing the call, and the result says each time it was (the model's
-- `repairs`). One JSON list per trace, since repairs are read with the result and never queried.

ALTER TABLE traces ADD COLUMN repairs TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(repairs));  -- [{phase, kind, message}]: replies read leniently
