-- Memory ids on the wire are random (32 lower-case hex digits of 128 random
-- bits), never the row id: a counter would let a caller guess the ids of
-- other memories. The row id stays the internal order (paging, retention).
ALTER TABLE memories ADD COLUMN public_id TEXT;
UPDATE memories SET public_id = lower(hex(randomblob(16)));
CREATE UNIQUE INDEX memories_by_public_id ON memories (public_id);

-- Idempotency keys answer the public ids of the memories they stored. Keys
-- of memories deleted since lose those ids (a replay answers the others).
UPDATE retain_keys SET ids = (
    SELECT json_group_array(public_id) FROM (
        SELECT m.public_id FROM json_each(retain_keys.ids) AS j
        JOIN memories AS m ON m.id = j.value
        ORDER BY j.key
    )
);

-- Forget means gone: with secure-delete, FTS5 removes a deleted row's terms
-- from the index at once instead of leaving them in old segments until a
-- merge (SQLite >= 3.44). `optimize` merges the segments already written,
-- dropping the terms of rows deleted before this migration.
INSERT INTO memories_fts (memories_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO memories_fts (memories_fts) VALUES ('optimize');
