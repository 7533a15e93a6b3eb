"""The SQLite file's schema: versioned migrations, applied when the database is opened."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import aiosqlite

from .call_record import APPROVED_NOTE, HELD_DECIDED
from .db import BUSY_TIMEOUT_MS, WRITE_PATIENCE, Database, StorageError, released_on_failure

# Each entry moves the schema from version i to i+1; never edit one that has shipped.
# held_outcome (core/storage/call_record.py) in SQL, for a proposal row named {p}.
_HELD_STATUS = (
    "CASE {p}.status "
    + " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in HELD_DECIDED.items())
    + " ELSE 'approved' END"
)
_HELD_ERROR = (
    "CASE {p}.status "
    "WHEN 'rejected' THEN 'rejected' || coalesce(': ' || {p}.reject_reason, '') "
    "WHEN 'withdrawn' THEN 'withdrawn' || coalesce(': ' || {p}.error, '') "
    f"ELSE '{APPROVED_NOTE}' END"
)

MIGRATIONS: list[str] = [
    """
    CREATE TABLE execution_log (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        correlation_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        agent TEXT,
        arguments TEXT NOT NULL,
        status TEXT NOT NULL,
        error_code TEXT,
        result TEXT,
        error TEXT,
        origin TEXT NOT NULL,
        started_at TEXT NOT NULL,
        finished_at TEXT NOT NULL,
        latency_ms REAL NOT NULL
    );
    CREATE INDEX execution_log_correlation ON execution_log(correlation_id);
    CREATE INDEX execution_log_started ON execution_log(started_at);

    CREATE TABLE facts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        content TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '',
        source TEXT,
        created_at TEXT NOT NULL
    );
    CREATE VIRTUAL TABLE facts_fts USING fts5(
        content, tags, content='facts', content_rowid='id'
    );
    CREATE TRIGGER facts_after_insert AFTER INSERT ON facts BEGIN
        INSERT INTO facts_fts(rowid, content, tags) VALUES (new.id, new.content, new.tags);
    END;
    CREATE TRIGGER facts_after_delete AFTER DELETE ON facts BEGIN
        INSERT INTO facts_fts(facts_fts, rowid, content, tags)
        VALUES ('delete', old.id, old.content, old.tags);
    END;
    """,
    """
    CREATE TABLE proposals (
        id TEXT PRIMARY KEY,
        tool TEXT NOT NULL,
        agent TEXT,
        arguments TEXT NOT NULL,
        risk TEXT NOT NULL,
        reason TEXT NOT NULL,
        confidence REAL,
        correlation_id TEXT NOT NULL,
        origin TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        decided_at TEXT,
        decided_by TEXT,
        reject_reason TEXT,
        executor TEXT,
        result TEXT,
        error TEXT,
        error_code TEXT,
        finished_at TEXT
    );
    CREATE INDEX proposals_status ON proposals(status, created_at);
    """,
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL DEFAULT '',
        model TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX conversations_updated ON conversations(updated_at);
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL REFERENCES conversations(id),
        role TEXT NOT NULL,
        kind TEXT NOT NULL,
        content TEXT NOT NULL DEFAULT '',
        thinking TEXT,
        tool_calls TEXT,
        tool_name TEXT,
        data TEXT,
        correlation_id TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX messages_conversation ON messages(conversation_id, id);
    """,
    # Cost accounting (core/usage/cost.py): each call's units, and MCP servers' background work.
    """
    ALTER TABLE execution_log ADD COLUMN cost_units REAL;
    CREATE INDEX execution_log_finished ON execution_log(finished_at);
    CREATE TABLE server_cost (
        day TEXT NOT NULL,
        server TEXT NOT NULL,
        kind TEXT NOT NULL,
        units REAL NOT NULL,
        PRIMARY KEY (day, server, kind)
    );
    """,
    # What had to be changed to store a row (text that is not UTF-8, a value cut to size).
    """
    ALTER TABLE execution_log ADD COLUMN note TEXT;
    ALTER TABLE proposals ADD COLUMN note TEXT;
    """,
    # Approvals bound to the call a person saw (core/approvals/proposal_store.py): the proposal's
    # signed digest, and one row per proposal ever approved, so none runs twice.
    """
    ALTER TABLE proposals ADD COLUMN digest TEXT;
    CREATE TABLE proposal_runs (
        proposal_id TEXT PRIMARY KEY,
        approved_at TEXT NOT NULL
    );
    """,
    # Every change to a proposal's row, by any process or by hand, advances one clock and
    # stamps the row with it: a list of thousands of proposals is brought up to date by
    # reading only the rows changed since (core/approvals/proposal_store.py ProposalStore.select).
    """
    CREATE TABLE proposals_clock (tick INTEGER NOT NULL);
    INSERT INTO proposals_clock (tick) VALUES (0);
    ALTER TABLE proposals ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX proposals_revision ON proposals(revision);
    CREATE TRIGGER proposals_inserted AFTER INSERT ON proposals BEGIN
        UPDATE proposals_clock SET tick = tick + 1;
        UPDATE proposals SET revision = (SELECT tick FROM proposals_clock)
        WHERE rowid = new.rowid;
    END;
    CREATE TRIGGER proposals_updated AFTER UPDATE ON proposals
    WHEN new.revision = old.revision BEGIN
        UPDATE proposals_clock SET tick = tick + 1;
        UPDATE proposals SET revision = (SELECT tick FROM proposals_clock)
        WHERE rowid = new.rowid;
    END;
    CREATE TRIGGER proposals_deleted AFTER DELETE ON proposals BEGIN
        UPDATE proposals_clock SET tick = tick + 1;
    END;
    """,
    # Each MCP server's tool list as last seen (core/mcp/tool_cache.py), and what a running
    # diana-tui shares with `diana` processes on the same data dir (core/shared/live.py): its
    # servers' state, and requests it carries out for them.
    """
    CREATE TABLE tool_cache (
        server TEXT PRIMARY KEY,
        fingerprint TEXT NOT NULL,
        refreshed_at TEXT NOT NULL,
        tools TEXT NOT NULL
    );
    CREATE TABLE live_apps (
        app_id TEXT PRIMARY KEY,
        pid INTEGER NOT NULL,
        config_dir TEXT NOT NULL,
        started_at TEXT NOT NULL,
        servers_at TEXT
    );
    CREATE TABLE live_servers (
        app_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        diagnostics TEXT NOT NULL,
        PRIMARY KEY (app_id, position)
    );
    CREATE TABLE live_requests (
        id INTEGER PRIMARY KEY,
        app_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        server TEXT,
        requested_at TEXT NOT NULL,
        picked_at TEXT,
        finished_at TEXT,
        outcome TEXT
    );
    CREATE INDEX live_requests_waiting ON live_requests(app_id, picked_at);
    """,
    """
    CREATE INDEX execution_log_usage ON execution_log(
        tool, agent, status, latency_ms, cost_units, finished_at, started_at
    );
    CREATE INDEX execution_log_agent ON execution_log(agent, started_at);
    """,
    # The proposal a call ran by (an approved call) or made (a call held for approval),
    # filled in for the rows written before from what they said of it.
    """
    ALTER TABLE execution_log ADD COLUMN proposal TEXT;
    UPDATE execution_log SET proposal = substr(origin, 10) WHERE origin LIKE 'proposal %';
    UPDATE execution_log SET proposal = json_extract(result, '$.proposal_id')
        WHERE proposal IS NULL AND status = 'pending_approval' AND json_valid(result)
        AND json_type(result, '$.proposal_id') = 'text';
    """,
    # The process a proposal's answer goes to, when only that one can use it (a server's
    # sampling request): once it is gone the proposal is withdrawn
    # (core/approvals/proposal_store.py).
    """
    ALTER TABLE proposals ADD COLUMN waiter TEXT;
    """,
    # A held call's row follows its proposal's decision (core/storage/call_record.py
    # held_outcome), in every process: when the proposal is decided, and when the row is
    # written after that.
    f"""
    CREATE INDEX execution_log_proposal ON execution_log(proposal) WHERE proposal IS NOT NULL;
    CREATE TRIGGER execution_log_held_decided AFTER UPDATE OF status ON proposals
    WHEN new.status <> 'pending' BEGIN
        UPDATE execution_log SET status = {_HELD_STATUS.format(p="new")},
            error = {_HELD_ERROR.format(p="new")}
        WHERE proposal = new.id AND status = 'pending_approval';
    END;
    CREATE TRIGGER execution_log_held_written AFTER INSERT ON execution_log
    WHEN new.status = 'pending_approval' AND new.proposal IS NOT NULL BEGIN
        UPDATE execution_log SET
            status = (SELECT {_HELD_STATUS.format(p="p")} FROM proposals p
                WHERE p.id = new.proposal),
            error = (SELECT {_HELD_ERROR.format(p="p")} FROM proposals p
                WHERE p.id = new.proposal)
        WHERE id = new.id AND EXISTS (
            SELECT 1 FROM proposals p WHERE p.id = new.proposal AND p.status <> 'pending'
        );
    END;
    UPDATE execution_log SET
        status = (SELECT {_HELD_STATUS.format(p="p")} FROM proposals p
            WHERE p.id = execution_log.proposal),
        error = (SELECT {_HELD_ERROR.format(p="p")} FROM proposals p
            WHERE p.id = execution_log.proposal)
    WHERE status = 'pending_approval' AND EXISTS (
        SELECT 1 FROM proposals p WHERE p.id = execution_log.proposal AND p.status <> 'pending'
    );
    """,
    # What a request to a running diana-tui asks besides its kind and server (core/shared/live.py):
    # the resource to read, the prompt to get and its arguments, as a JSON object.
    """
    ALTER TABLE live_requests ADD COLUMN params TEXT;
    """,
    # Memory by meaning (core/memory/fact_store.py): a fact's metadata; its vector from the
    # embedding model, and which process is embedding it; the full-text index rebuilt with
    # porter stemming (a question's "drives" finds a fact's "drive"), kept by triggers on
    # every insert, update and delete, so forgetting a fact removes its index row and vector.
    """
    ALTER TABLE facts ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
    CREATE TABLE fact_vectors (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        fact_id INTEGER NOT NULL UNIQUE,
        model TEXT NOT NULL,
        dimensions INTEGER NOT NULL,
        vector BLOB NOT NULL
    );
    CREATE INDEX fact_vectors_model ON fact_vectors(model, id);
    CREATE TABLE fact_embedding_claims (
        fact_id INTEGER PRIMARY KEY,
        owner TEXT NOT NULL,
        claimed_at REAL NOT NULL
    );
    DROP TRIGGER facts_after_insert;
    DROP TRIGGER facts_after_delete;
    DROP TABLE facts_fts;
    CREATE VIRTUAL TABLE facts_fts USING fts5(
        content, tags, content='facts', content_rowid='id', tokenize='porter unicode61'
    );
    INSERT INTO facts_fts(facts_fts) VALUES ('rebuild');
    CREATE TRIGGER facts_after_insert AFTER INSERT ON facts BEGIN
        INSERT INTO facts_fts(rowid, content, tags) VALUES (new.id, new.content, new.tags);
    END;
    CREATE TRIGGER facts_after_delete AFTER DELETE ON facts BEGIN
        INSERT INTO facts_fts(facts_fts, rowid, content, tags)
        VALUES ('delete', old.id, old.content, old.tags);
        DELETE FROM fact_vectors WHERE fact_id = old.id;
        DELETE FROM fact_embedding_claims WHERE fact_id = old.id;
    END;
    CREATE TRIGGER facts_after_update AFTER UPDATE OF content, tags ON facts BEGIN
        INSERT INTO facts_fts(facts_fts, rowid, content, tags)
        VALUES ('delete', old.id, old.content, old.tags);
        INSERT INTO facts_fts(rowid, content, tags) VALUES (new.id, new.content, new.tags);
        DELETE FROM fact_vectors WHERE fact_id = new.id AND new.content <> old.content;
    END;
    """,
    # What a proposal's call is likely to cost, from its tool's past calls when it was made.
    """
    ALTER TABLE proposals ADD COLUMN estimated_cost REAL;
    """,
    # The MCP sub-agent's requests as they change, so every process sees them.
    """
    CREATE TABLE subagent_requests (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        server TEXT NOT NULL,
        priority TEXT NOT NULL,
        state TEXT NOT NULL,
        progress INTEGER NOT NULL,
        message TEXT NOT NULL,
        origin TEXT NOT NULL,
        pid INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX subagent_requests_created ON subagent_requests(created_at);
    """,
    # An approved call's own run, as its proposal keeps it (the wait for the person apart):
    # how long it ran and what it cost. Which front end began a conversation: the app
    # reopens its own, never one `diana ask` began (those before were the app's).
    """
    ALTER TABLE proposals ADD COLUMN ran_ms REAL;
    ALTER TABLE proposals ADD COLUMN cost_units REAL;
    ALTER TABLE conversations ADD COLUMN origin TEXT NOT NULL DEFAULT 'app';
    CREATE INDEX conversations_origin ON conversations(origin, updated_at);
    """,
    # The program a proposal's MCP server ran when it was made: approved, it runs only there.
    """
    ALTER TABLE proposals ADD COLUMN server_identity TEXT;
    """,
    # Each conversation's own system prompt and Ollama options (core/chat/chats.py), and the
    # words of what the person and the model said, found with FTS5.
    """
    ALTER TABLE conversations ADD COLUMN system TEXT NOT NULL DEFAULT '';
    ALTER TABLE conversations ADD COLUMN options TEXT NOT NULL DEFAULT '{}';
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        content, content='messages', content_rowid='id', tokenize='porter unicode61'
    );
    INSERT INTO messages_fts(rowid, content)
        SELECT id, content FROM messages WHERE role IN ('user', 'assistant');
    CREATE TRIGGER messages_after_insert AFTER INSERT ON messages
    WHEN new.role IN ('user', 'assistant') BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END;
    CREATE TRIGGER messages_after_delete AFTER DELETE ON messages
    WHEN old.role IN ('user', 'assistant') BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content)
        VALUES ('delete', old.id, old.content);
    END;
    """,
    # Tool pins (core/mcp/pins.py): each server tool's definition as first offered, by the
    # server's launch identity and the tool's name; a different one offered since holds it.
    """
    CREATE TABLE tool_pins (
        identity TEXT NOT NULL,
        tool TEXT NOT NULL,
        server TEXT NOT NULL,
        digest TEXT NOT NULL,
        definition TEXT NOT NULL,
        pinned_at TEXT NOT NULL,
        offered_digest TEXT,
        offered TEXT,
        changed_at TEXT,
        PRIMARY KEY (identity, tool)
    );
    """,
    # Conversations found by their words without reading a message per match
    # (core/chat/chats.py Chats.search): each conversation gets a key that never changes
    # (the table rebuilt around an INTEGER PRIMARY KEY, which VACUUM keeps), and the words of
    # what the person and the model said are indexed under a rowid that carries it:
    # key << 32 | message id. The index keeps no copy of the text (contentless): triggers
    # remove a message's words with the text it had.
    """
    CREATE TABLE conversations_keyed (
        key INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT UNIQUE,
        title TEXT NOT NULL DEFAULT '',
        model TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        origin TEXT NOT NULL DEFAULT 'app',
        system TEXT NOT NULL DEFAULT '',
        options TEXT NOT NULL DEFAULT '{}'
    );
    INSERT INTO conversations_keyed (key, id, title, model, created_at, updated_at, origin,
        system, options)
        SELECT rowid, id, title, model, created_at, updated_at, origin, system, options
        FROM conversations ORDER BY rowid;
    DROP TABLE conversations;
    ALTER TABLE conversations_keyed RENAME TO conversations;
    CREATE INDEX conversations_updated ON conversations(updated_at);
    CREATE INDEX conversations_origin ON conversations(origin, updated_at);
    DROP TRIGGER messages_after_insert;
    DROP TRIGGER messages_after_delete;
    DROP TABLE messages_fts;
    CREATE VIRTUAL TABLE conversation_words USING fts5(
        content, content='', tokenize='porter unicode61'
    );
    INSERT INTO conversation_words(rowid, content)
        SELECT (c.key << 32) | m.id, m.content FROM messages m
        JOIN conversations c ON c.id = m.conversation_id
        WHERE m.role IN ('user', 'assistant');
    CREATE TRIGGER messages_after_insert AFTER INSERT ON messages
    WHEN new.role IN ('user', 'assistant')
        AND EXISTS (SELECT 1 FROM conversations WHERE id = new.conversation_id) BEGIN
        INSERT INTO conversation_words(rowid, content) VALUES (
            ((SELECT key FROM conversations WHERE id = new.conversation_id) << 32) | new.id,
            new.content
        );
    END;
    CREATE TRIGGER messages_after_delete AFTER DELETE ON messages
    WHEN old.role IN ('user', 'assistant')
        AND EXISTS (SELECT 1 FROM conversations WHERE id = old.conversation_id) BEGIN
        INSERT INTO conversation_words(conversation_words, rowid, content) VALUES (
            'delete',
            ((SELECT key FROM conversations WHERE id = old.conversation_id) << 32) | old.id,
            old.content
        );
    END;
    CREATE TRIGGER messages_after_update AFTER UPDATE OF content, role, conversation_id
    ON messages BEGIN
        INSERT INTO conversation_words(conversation_words, rowid, content)
        SELECT 'delete', (key << 32) | old.id, old.content FROM conversations
        WHERE id = old.conversation_id AND old.role IN ('user', 'assistant');
        INSERT INTO conversation_words(rowid, content)
        SELECT (key << 32) | new.id, new.content FROM conversations
        WHERE id = new.conversation_id AND new.role IN ('user', 'assistant');
    END;
    CREATE TRIGGER conversations_before_delete BEFORE DELETE ON conversations BEGIN
        DELETE FROM messages WHERE conversation_id = old.id;
    END;
    """,
]


async def connect(
    path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS, patience: float = WRITE_PATIENCE
) -> Database:
    """Open the database file in WAL mode and bring its schema up to date."""
    db = await Database.open(path, busy_timeout_ms, patience)
    async with released_on_failure(path, db.close):
        await db.write(migrate)
    return db


async def migrate(connection: aiosqlite.Connection) -> None:
    """Inside one write transaction, so two processes opening a new database take turns."""
    async with connection.execute("PRAGMA user_version") as cursor:
        row = await cursor.fetchone()
    version = int(row[0]) if row else 0
    if version > len(MIGRATIONS):
        raise StorageError(
            f"the database is from a newer diana (schema {version}, this one knows "
            f"{len(MIGRATIONS)}); upgrade diana-tui"
        )
    for index in range(version, len(MIGRATIONS)):
        for statement in _split_statements(MIGRATIONS[index]):
            await connection.execute(statement)
        await connection.execute(f"PRAGMA user_version = {index + 1}")


def _split_statements(script: str) -> list[str]:
    """A migration's statements, one by one: a line ends one when SQLite's own parser says the
    text so far is complete (a trigger's body, semicolons and all, stays whole)."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current.strip())
    return statements
