-- Why: a database restored from a backup puts the sequence veralith_trace_ids back and forgets the
-- blocks of ids it handed to hosts after the backup, so it would hand them again to other hosts while
-- the hosts holding them still hand out their ids (issue 35, Deliver 3). Each block drawn is recorded
-- here with the host that holds it; a host records its block again on its shipping rounds (a restore
-- forgets the row too), and a host whose unused block overlaps another owner's drops the rest of it
-- (veralith.store.idblocks). A block is at most 1,000 ids wide, so overlaps are found by an index
-- range on lo. Two owners may record the same block (the overlap a restore made): both see it.

CREATE TABLE trace_id_blocks (
    lo                 BIGINT      NOT NULL,              -- first id of the block
    hi                 BIGINT      NOT NULL,              -- last id of the block
    owner              TEXT        NOT NULL,              -- the host (and its spool folder) holding it
    taken_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (lo, owner)
);
