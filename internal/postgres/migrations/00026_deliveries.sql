-- Deliveries: received documents written to the connectors' destinations
-- (folders, SFTP, S3, HTTP) by the outbox's dispatchers. One outbox row of
-- kind 'delivery' per received message and destination its route names,
-- queued by the deliveries forwarder from the event feed (cursor
-- "deliveries"). The row references the message; its payload is streamed
-- from the stored payload at each attempt, never copied into the outbox.
-- A message with a delivery pending is not purged (the purger's
-- finalMessage condition), so the payload outlives the retries.

-- +goose Up

-- NOT VALID: the rows already there satisfy the stricter check they were
-- written under; new rows are checked. Skips a scan of the outbox under
-- the table's exclusive lock.
ALTER TABLE outbox DROP CONSTRAINT outbox_kind_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_kind_check
    CHECK (kind IN ('message', 'mdn', 'webhook', 'delivery')) NOT VALID;

-- destination: the destination's name in the connectors document; route:
-- the route that chose it (for people); target_name: the name the
-- document is written under, fixed by the first attempt, so every retry
-- writes the same name (a retry after a lost answer rewrites the same
-- file instead of adding a second). Empty for the other kinds.
ALTER TABLE outbox
    ADD COLUMN destination text NOT NULL DEFAULT '',
    ADD COLUMN route       text NOT NULL DEFAULT '',
    ADD COLUMN target_name text NOT NULL DEFAULT '';

-- One delivery per message and destination, whatever queues it.
CREATE UNIQUE INDEX outbox_delivery_idx ON outbox (message_id, destination) WHERE kind = 'delivery';
-- The backlog gauges: pending deliveries per destination, oldest first.
CREATE INDEX outbox_delivery_pending_idx ON outbox (destination, created_at)
    WHERE kind = 'delivery' AND status = 'pending';

-- The functional identifiers (X12 GS01) of an interchange's explicit
-- groups, in order, for routes that match on them; empty for EDIFACT
-- without groups and for the interchanges stored before.
ALTER TABLE message_interchanges ADD COLUMN group_types text[] NOT NULL DEFAULT '{}';

-- delivery-done: a document was written to a destination;
-- delivery-failed: a delivery failed for good (a dead letter).
ALTER TABLE events
    DROP CONSTRAINT events_type_check,
    ADD CONSTRAINT events_type_check
        CHECK (type = ANY ('{received,sent,delivered,failed,overdue,ack,ack-overdue,interchange-repeated,delivery-done,delivery-failed}'::text[])) NOT VALID;

-- The delivery's end is an event written by the transaction that finishes
-- the row, whichever path does it: the dispatcher's outcome or the
-- claim's give-up of a row whose attempts and retry window ran out.
-- +goose StatementBegin
CREATE FUNCTION edihub_delivery_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (type, message, partner, direction, detail)
    SELECT CASE NEW.status WHEN 'done' THEN 'delivery-done' ELSE 'delivery-failed' END,
           m.id, m.partner, m.direction, jsonb_strip_nulls(jsonb_build_object(
               'message_id', m.message_id,
               'destination', NEW.destination,
               'route', nullif(NEW.route, ''),
               'name', nullif(NEW.target_name, ''),
               'attempts', NEW.attempts,
               'error', nullif(left(NEW.last_error, 300), '')))
      FROM messages m WHERE m.id = NEW.message_id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_delivery_event AFTER UPDATE OF status ON outbox
    FOR EACH ROW WHEN (NEW.kind = 'delivery' AND OLD.status = 'pending' AND NEW.status IN ('done', 'failed'))
    EXECUTE FUNCTION edihub_delivery_event();

-- +goose Down
DROP TRIGGER outbox_delivery_event ON outbox;
DROP FUNCTION edihub_delivery_event();
DELETE FROM events WHERE type IN ('delivery-done', 'delivery-failed');
ALTER TABLE events
    DROP CONSTRAINT events_type_check,
    ADD CONSTRAINT events_type_check
        CHECK (type = ANY ('{received,sent,delivered,failed,overdue,ack,ack-overdue,interchange-repeated}'::text[])) NOT VALID;
DELETE FROM event_cursors WHERE name = 'deliveries';
DELETE FROM outbox WHERE kind = 'delivery';
DROP INDEX outbox_delivery_pending_idx;
DROP INDEX outbox_delivery_idx;
ALTER TABLE outbox DROP COLUMN target_name, DROP COLUMN route, DROP COLUMN destination;
ALTER TABLE message_interchanges DROP COLUMN group_types;
ALTER TABLE outbox DROP CONSTRAINT outbox_kind_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_kind_check CHECK (kind IN ('message', 'mdn', 'webhook')) NOT VALID;
