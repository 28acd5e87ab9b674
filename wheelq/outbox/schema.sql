-- The wheelq outbox's tables (docs/guides/outbox.md). `wheelq outbox init --dsn DSN` runs
-- this file; `wheelq outbox init --sql` prints it for a migration tool (Alembic:
-- op.execute(wheelq.outbox.schema_sql()); Django: the wheelq.contrib.django app's migration).
-- Every statement may run again: it changes nothing that is already there.

-- Runs one at a time (several pods starting together): CREATE ... IF NOT EXISTS and CREATE OR
-- REPLACE race with themselves (a duplicate pg_type row, "tuple concurrently updated"). The
-- lock is the transaction's, released at its commit; the number is wheelq's own.
SELECT pg_advisory_xact_lock(7239004175011985408);

-- One row per job enqueued in an application's transaction, until a relay has placed it
-- in Redis. mode 'd': the job is due value_ms after written_ms (this server's clock at the
-- INSERT); 'a': due at value_ms (epoch ms). envelope: the job as wheelq stores it (msgpack).
CREATE TABLE IF NOT EXISTS wheelq_outbox (
    seq        bigserial PRIMARY KEY,
    topic      text     NOT NULL,
    job_id     text     NOT NULL,
    mode       "char"   NOT NULL CHECK (mode IN ('d', 'a')),
    value_ms   bigint   NOT NULL,
    replace    boolean  NOT NULL DEFAULT false,
    order_key  text     NOT NULL DEFAULT '',
    envelope   bytea    NOT NULL,
    written_ms bigint   NOT NULL
        DEFAULT (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint
);

-- Rows Redis refused for good (a key of the wrong type, a topic's bad registry entry), kept
-- for a person to decide, with why.
CREATE TABLE IF NOT EXISTS wheelq_outbox_rejected (
    seq         bigint  NOT NULL,
    topic       text    NOT NULL,
    job_id      text    NOT NULL,
    mode        "char"  NOT NULL,
    value_ms    bigint  NOT NULL,
    replace     boolean NOT NULL,
    order_key   text    NOT NULL,
    envelope    bytea   NOT NULL,
    written_ms  bigint  NOT NULL,
    error       text    NOT NULL,
    rejected_ms bigint  NOT NULL
);

-- The table's identity: the prefix of each row's replay token, so a table made again never
-- repeats the tokens of the one it replaced.
CREATE TABLE IF NOT EXISTS wheelq_outbox_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO wheelq_outbox_meta (key, value)
    VALUES ('source_id', 'o' || replace(gen_random_uuid()::text, '-', ''))
    ON CONFLICT (key) DO NOTHING;
INSERT INTO wheelq_outbox_meta (key, value) VALUES ('format', '1')
    ON CONFLICT (key) DO NOTHING;

-- once(): the jobs whose effects a handler applied, written in the handler's transaction;
-- a relay deletes records older than its done_retention_ms.
CREATE TABLE IF NOT EXISTS wheelq_outbox_done (
    topic   text   NOT NULL,
    job_id  text   NOT NULL,
    done_ms bigint NOT NULL
        DEFAULT (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint,
    PRIMARY KEY (topic, job_id)
);
CREATE INDEX IF NOT EXISTS wheelq_outbox_done_by_time ON wheelq_outbox_done (done_ms);

-- A commit that inserted rows wakes the relays (LISTEN wheelq_outbox): one notification per
-- statement, delivered at commit and never for a rollback.
CREATE OR REPLACE FUNCTION wheelq_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('wheelq_outbox', '');
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS wheelq_outbox_notify ON wheelq_outbox;
CREATE TRIGGER wheelq_outbox_notify AFTER INSERT ON wheelq_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION wheelq_outbox_notify();
