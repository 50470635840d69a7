-- The outbound lifecycle around the leader's workers: idempotency keys on
-- queued messages, retries bounded by a time window as well as a count, the
-- durable event feed (filled by a trigger, so every writer emits events in
-- its own transaction), webhook deliveries through the outbox, and the
-- indexes the purger's deletes need.

-- +goose Up

-- Idempotency-Key of POST /api/v1/messages: one message per partner and key.
-- idempotency_hash fingerprints the document (content type, filename,
-- payload) so a key reused for another document is refused. The key lives
-- as long as the message row (the audit retention).
ALTER TABLE messages
    ADD COLUMN idempotency_key  text,
    ADD COLUMN idempotency_hash bytea;
CREATE UNIQUE INDEX messages_idempotency_key_idx ON messages (partner, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- retry_until: a retryable failure is retried, even past max_attempts, until
-- this time (database clock); NULL means max_attempts alone decides.
-- Webhook deliveries are outbox rows of their own kind.
ALTER TABLE outbox ADD COLUMN retry_until timestamptz;
ALTER TABLE outbox DROP CONSTRAINT outbox_kind_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_kind_check CHECK (kind IN ('message', 'mdn', 'webhook'));

-- The event feed (GET /api/v1/events, the webhook). id is the event's stable
-- identity (de-duplication); txid is the writing transaction's id. Identity
-- values are taken at insert and committed in any order, so the feed is read
-- in (txid, id) order and only up to the oldest transaction still running
-- (pg_snapshot_xmin): every event that becomes visible later belongs to a
-- transaction at or above that horizon, so it sorts after everything already
-- returned and a consumer paging with the cursor never skips one.
CREATE TABLE events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    txid        xid8        NOT NULL DEFAULT pg_current_xact_id(),
    type        text        NOT NULL CHECK (type IN ('received', 'sent', 'delivered', 'failed', 'overdue')),
    message     bigint      NOT NULL,
    partner     text        NOT NULL,
    direction   text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    detail      jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX events_feed_idx ON events (txid, id);
CREATE INDEX events_created_at_idx ON events (created_at);

-- Where each consumer inside edihub (the webhook forwarder) has read the
-- feed up to.
CREATE TABLE event_cursors (
    name   text   PRIMARY KEY,
    txid   xid8   NOT NULL,
    id     bigint NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION edihub_message_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.direction = 'inbound' AND NEW.status = 'processed' THEN
            t := 'received';
        END IF;
    ELSIF NEW.status IS DISTINCT FROM OLD.status AND NEW.direction = 'outbound'
          AND NEW.status IN ('sent', 'delivered', 'failed') THEN
        t := NEW.status;
    END IF;
    IF t IS NOT NULL THEN
        INSERT INTO events (type, message, partner, direction, detail)
        VALUES (t, NEW.id, NEW.partner, NEW.direction, jsonb_strip_nulls(jsonb_build_object(
            'message_id', NEW.message_id,
            'status', NEW.status,
            'disposition', nullif(NEW.disposition, ''),
            'error', nullif(left(NEW.error, 300), ''),
            'filename', nullif(NEW.filename, ''))));
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.mdn_overdue AND NOT OLD.mdn_overdue THEN
        INSERT INTO events (type, message, partner, direction, detail)
        VALUES ('overdue', NEW.id, NEW.partner, NEW.direction, jsonb_build_object(
            'message_id', NEW.message_id, 'status', NEW.status, 'mdn_due_at', NEW.mdn_due_at));
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER messages_event_insert AFTER INSERT ON messages
    FOR EACH ROW WHEN (NEW.direction = 'inbound' AND NEW.status = 'processed')
    EXECUTE FUNCTION edihub_message_event();
CREATE TRIGGER messages_event_update AFTER UPDATE OF status, mdn_overdue ON messages
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.mdn_overdue IS DISTINCT FROM OLD.mdn_overdue)
    EXECUTE FUNCTION edihub_message_event();

-- The purger's deletes, oldest first (the cascade from messages to outbox
-- uses outbox_message_id_idx of 00004).
CREATE INDEX payloads_created_at_idx ON payloads (created_at);
CREATE INDEX mdns_created_at_idx ON mdns (created_at);
CREATE INDEX mdn_inbox_processed_at_idx ON mdn_inbox (processed_at) WHERE processed_at IS NOT NULL;
CREATE INDEX leader_heartbeats_beat_at_only_idx ON leader_heartbeats (beat_at);

-- +goose Down
DROP INDEX leader_heartbeats_beat_at_only_idx;
DROP INDEX mdn_inbox_processed_at_idx;
DROP INDEX mdns_created_at_idx;
DROP INDEX payloads_created_at_idx;
DROP TRIGGER messages_event_update ON messages;
DROP TRIGGER messages_event_insert ON messages;
DROP FUNCTION edihub_message_event();
DROP TABLE event_cursors;
DROP TABLE events;
DELETE FROM outbox WHERE kind = 'webhook';
ALTER TABLE outbox DROP CONSTRAINT outbox_kind_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_kind_check CHECK (kind IN ('message', 'mdn'));
ALTER TABLE outbox DROP COLUMN retry_until;
DROP INDEX messages_idempotency_key_idx;
ALTER TABLE messages
    DROP COLUMN idempotency_hash,
    DROP COLUMN idempotency_key;
