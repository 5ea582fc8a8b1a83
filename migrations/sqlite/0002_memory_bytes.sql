-- The bytes of every stored memory (title, body and content), kept by
-- triggers, so the store's size bound (memory.max_total_bytes) reads one row
-- instead of scanning the table.
CREATE TABLE memory_bytes (
    shard INTEGER PRIMARY KEY,
    bytes INTEGER NOT NULL
);
INSERT INTO memory_bytes (shard, bytes)
SELECT 0, COALESCE(SUM(length(CAST(title AS BLOB)) + length(CAST(body AS BLOB)) + length(CAST(content AS BLOB))), 0)
FROM memories;
CREATE TRIGGER memory_bytes_insert AFTER INSERT ON memories BEGIN
    UPDATE memory_bytes
    SET bytes = bytes + length(CAST(new.title AS BLOB)) + length(CAST(new.body AS BLOB))
        + length(CAST(new.content AS BLOB))
    WHERE shard = 0;
END;
CREATE TRIGGER memory_bytes_delete AFTER DELETE ON memories BEGIN
    UPDATE memory_bytes
    SET bytes = bytes - length(CAST(old.title AS BLOB)) - length(CAST(old.body AS BLOB))
        - length(CAST(old.content AS BLOB))
    WHERE shard = 0;
END;
