-- Outbound sending: what the dispatcher keeps of a built AS2 message so that
-- every retry posts the same bytes with the same MIC, a wakeup for idle
-- dispatchers, and an index for the API's per-partner listing.

-- +goose Up

-- mic/mic_alg: the MIC computed when the message was built (first attempt);
-- built_at: when body and headers were frozen; last_attempt_at/last_status:
-- the latest HTTP exchange, for operators.
ALTER TABLE outbox
    ADD COLUMN mic             text        NOT NULL DEFAULT '',
    ADD COLUMN mic_alg         text        NOT NULL DEFAULT '',
    ADD COLUMN built_at        timestamptz,
    ADD COLUMN last_attempt_at timestamptz,
    ADD COLUMN last_status     integer;

-- Wake the dispatchers of every replica when work is queued, so a new
-- message leaves in well under the poll interval. The payload is the kind;
-- the dispatchers claim with SKIP LOCKED, so one wakeup for many rows is fine.
-- +goose StatementBegin
CREATE FUNCTION edihub_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('edihub_outbox', NEW.kind);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH ROW WHEN (NEW.status = 'pending') EXECUTE FUNCTION edihub_outbox_notify();

-- GET /api/v1/messages?partner=... pages by id descending.
CREATE INDEX messages_partner_id_idx ON messages (partner, id);

-- +goose Down
DROP INDEX messages_partner_id_idx;
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION edihub_outbox_notify();
ALTER TABLE outbox
    DROP COLUMN last_status,
    DROP COLUMN last_attempt_at,
    DROP COLUMN built_at,
    DROP COLUMN mic_alg,
    DROP COLUMN mic;
