-- The ops console's message trace and search: one row per send attempt,
-- and the indexes its pages and the API's filters need so that every one
-- of their queries is an index scan on a hub with millions of messages
-- (TestConsoleQueriesUseIndexes shows the plans).

-- +goose Up

-- One row per finished send attempt of an outbound message, written by
-- FinishOutbox in the transaction that records the attempt's outcome.
-- replica is the dispatcher that claimed the attempt; outcome is what the
-- attempt left: retrying (another is scheduled), done (the partner took
-- it) or failed (for good). An attempt whose claim expired without an
-- outcome (a crash) has no row. Rows go with their message.
CREATE TABLE message_attempts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   bigint      NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    attempt      integer     NOT NULL,
    replica      text        NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    http_status  integer,
    outcome      text        NOT NULL CHECK (outcome IN ('retrying', 'done', 'failed')),
    error        text        NOT NULL DEFAULT ''
);
-- A message's attempts in order; also the cascade from messages.
CREATE INDEX message_attempts_message_idx ON message_attempts (message_id, id);

-- A message's events in order (the trace).
CREATE INDEX events_message_idx ON events (message, id);

-- Search by AS2 Message-ID, any partner or direction.
CREATE INDEX messages_message_id_idx ON messages (message_id);

-- Search by file name prefix: text_pattern_ops compares bytes, so a
-- prefix is a range of the index whatever the database's collation.
CREATE INDEX messages_filename_idx ON messages (filename text_pattern_ops);

-- The list filtered by status (failed, retrying: a few among millions),
-- newest first.
CREATE INDEX messages_status_id_idx ON messages (status, id);

-- A partner's messages of one status, newest first: the list filtered by
-- partner and status, and each partner's last success (partner health).
CREATE INDEX messages_partner_status_id_idx ON messages (partner, status, id);

-- The async MDNs of a message (the trace): the ones applied to it by
-- message_ref (also what ON DELETE SET NULL needs when the purger deletes
-- messages), the orphans by the Message-ID they name.
CREATE INDEX mdn_inbox_message_ref_idx ON mdn_inbox (message_ref) WHERE message_ref IS NOT NULL;
CREATE INDEX mdn_inbox_original_message_id_idx ON mdn_inbox (original_message_id);

-- The outbound messages not completed by a time: the backlog of the day
-- report's figures (today's on the console's hub page), which read the
-- whole table without it.
CREATE INDEX messages_outbound_completed_at_idx ON messages (completed_at) WHERE direction = 'outbound';

-- +goose Down
DROP INDEX messages_outbound_completed_at_idx;
DROP INDEX mdn_inbox_original_message_id_idx;
DROP INDEX mdn_inbox_message_ref_idx;
DROP INDEX messages_partner_status_id_idx;
DROP INDEX messages_status_id_idx;
DROP INDEX messages_filename_idx;
DROP INDEX messages_message_id_idx;
DROP INDEX events_message_idx;
DROP TABLE message_attempts;
