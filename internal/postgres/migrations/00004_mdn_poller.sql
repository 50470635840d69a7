-- The leader's MDN poller: what became of each async MDN in the inbox, how
-- many times an overdue message was resent, a wakeup for the poller when an
-- MDN is stored and for the dispatchers when a message is queued again.

-- +goose Up

-- state: pending (not yet looked at), processed (applied to message_ref) or
-- orphan (matched no message it could apply to; reason says why). partner is
-- the configured partner the MDN came from, '' when unknown. The fence and
-- processed_at of 00001 record which term decided it.
ALTER TABLE mdn_inbox
    ADD COLUMN state       text   NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'processed', 'orphan')),
    ADD COLUMN reason      text   NOT NULL DEFAULT '',
    ADD COLUMN partner     text   NOT NULL DEFAULT '',
    ADD COLUMN message_ref bigint REFERENCES messages (id) ON DELETE SET NULL;
-- Rows processed before this migration (none are: nothing processed them).
UPDATE mdn_inbox SET state = CASE WHEN result = 'orphan' THEN 'orphan' ELSE 'processed' END WHERE processed_at IS NOT NULL;
-- GET /api/v1/mdns?state=... pages by id descending; the orphan gauge counts.
CREATE INDEX mdn_inbox_state_id_idx ON mdn_inbox (state, id);

-- mdn_resends: how many times the poller resent the message because its
-- async MDN was overdue (partner setting resend_overdue).
-- mic_verified: false when the message was delivered on an unsigned MDN
-- without Received-content-MIC (allowed for unsigned receipts, RFC 4130
-- section 7.4.3), true when the returned MIC matched, NULL otherwise.
ALTER TABLE messages
    ADD COLUMN mdn_resends  integer NOT NULL DEFAULT 0,
    ADD COLUMN mic_verified boolean;
-- edihub_mdn_overdue{partner} counts these.
CREATE INDEX messages_mdn_overdue_idx ON messages (partner) WHERE mdn_overdue;

-- The poller and resends find a message's outbox row by message_id.
CREATE INDEX outbox_message_id_idx ON outbox (message_id);

-- Wake the leader's MDN poller when an async MDN is stored.
-- +goose StatementBegin
CREATE FUNCTION edihub_mdn_inbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('edihub_mdn_inbox', NEW.id::text);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER mdn_inbox_notify AFTER INSERT ON mdn_inbox
    FOR EACH ROW EXECUTE FUNCTION edihub_mdn_inbox_notify();

-- A finished outbox row queued again (a resend) wakes the dispatchers like a
-- new one.
CREATE TRIGGER outbox_requeue_notify AFTER UPDATE OF status ON outbox
    FOR EACH ROW WHEN (OLD.status <> 'pending' AND NEW.status = 'pending') EXECUTE FUNCTION edihub_outbox_notify();

-- +goose Down
DROP TRIGGER outbox_requeue_notify ON outbox;
DROP TRIGGER mdn_inbox_notify ON mdn_inbox;
DROP FUNCTION edihub_mdn_inbox_notify();
DROP INDEX messages_mdn_overdue_idx;
DROP INDEX outbox_message_id_idx;
ALTER TABLE messages
    DROP COLUMN mic_verified,
    DROP COLUMN mdn_resends;
DROP INDEX mdn_inbox_state_id_idx;
ALTER TABLE mdn_inbox
    DROP COLUMN message_ref,
    DROP COLUMN partner,
    DROP COLUMN reason,
    DROP COLUMN state;
