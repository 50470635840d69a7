-- Send attempts numbered across resends, recorded when an async MDN
-- decided the message while they were under way, and the outcomes an
-- attempt can end with after it was recorded; the event of an outbound
-- interchange control number repeated.

-- +goose Up

-- attempts_before counts the attempts of a message's earlier sends: a
-- resend (requeue) adds the row's attempts to it and starts attempts
-- again at 0 (they bound the retries of one send), so that the attempts
-- recorded in message_attempts go on where the last send stopped.
ALTER TABLE outbox ADD COLUMN attempts_before integer NOT NULL DEFAULT 0;

-- decided_by_mdn marks a message's row the MDN poller finished: the
-- partner's async MDN decided the message while the row was pending (a
-- retry waiting, or an attempt under way whose outcome is recorded
-- after). The row keeps its claim's replica and attempt count, so that
-- the attempt under way is still recorded.
ALTER TABLE outbox ADD COLUMN decided_by_mdn boolean NOT NULL DEFAULT false;

-- cancelled: the retry it scheduled was cancelled by an operator;
-- negative: the partner took the message and its MDN refused it.
ALTER TABLE message_attempts DROP CONSTRAINT message_attempts_outcome_check;
ALTER TABLE message_attempts ADD CONSTRAINT message_attempts_outcome_check
    CHECK (outcome IN ('retrying', 'done', 'failed', 'cancelled', 'negative'));

-- interchange-repeated: an outbound message carries an interchange whose
-- control number (same partner, sender and receiver) was sent before
-- within the partner's duplicate window; the partner's acknowledgement of
-- either cannot be told apart.
ALTER TABLE events
    DROP CONSTRAINT events_type_check,
    ADD CONSTRAINT events_type_check
        CHECK (type = ANY ('{received,sent,delivered,failed,overdue,ack,ack-overdue,interchange-repeated}'::text[])) NOT VALID;

-- +goose Down
DELETE FROM events WHERE type = 'interchange-repeated';
ALTER TABLE events
    DROP CONSTRAINT events_type_check,
    ADD CONSTRAINT events_type_check CHECK (type = ANY ('{received,sent,delivered,failed,overdue,ack,ack-overdue}'::text[])) NOT VALID;
UPDATE message_attempts SET outcome = 'failed' WHERE outcome IN ('cancelled', 'negative');
ALTER TABLE message_attempts DROP CONSTRAINT message_attempts_outcome_check;
ALTER TABLE message_attempts ADD CONSTRAINT message_attempts_outcome_check
    CHECK (outcome IN ('retrying', 'done', 'failed'));
ALTER TABLE outbox DROP COLUMN decided_by_mdn;
ALTER TABLE outbox DROP COLUMN attempts_before;
