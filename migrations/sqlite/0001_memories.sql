-- Memories: typed observations and session summaries, per subject.
-- Rows are never updated; retention and Forget delete them.
CREATE TABLE memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    subject TEXT NOT NULL,
    -- One full-text token naming the subject, so a search stays within it.
    subject_key TEXT NOT NULL,
    memory_type TEXT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    -- The structured content as JSON.
    content TEXT NOT NULL,
    -- JSON array of the scopes a principal must hold.
    scopes TEXT NOT NULL DEFAULT '[]',
    request_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX memories_by_subject ON memories (subject);
CREATE INDEX memories_by_subject_type ON memories (subject, memory_type);
CREATE INDEX memories_by_subject_age ON memories (subject, created_at_ms);

CREATE VIRTUAL TABLE memories_fts USING fts5(
    subject_key, title, body,
    content = 'memories', content_rowid = 'id',
    tokenize = 'porter unicode61'
);
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, subject_key, title, body)
    VALUES (new.id, new.subject_key, new.title, new.body);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, subject_key, title, body)
    VALUES ('delete', old.id, old.subject_key, old.title, old.body);
END;

-- Idempotency keys of Retain calls, per subject, and the ids they stored.
CREATE TABLE retain_keys (
    key TEXT NOT NULL,
    subject TEXT NOT NULL,
    -- JSON array of memory ids.
    ids TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (subject, key)
);
CREATE INDEX retain_keys_by_age ON retain_keys (created_at_ms);

