-- The ops console's reads (internal/console): the events of one message
-- on its trace page, and each partner's health on the partners page. Each
-- page's query reads an index, not the table: the console must stay fast
-- with millions of messages.
--
-- (00011 is left to the message trace's own migration, built alongside.)

-- +goose Up

-- A message's events, oldest first (its trace page).
CREATE INDEX events_message_idx ON events (message, id);

-- A partner's last success: the latest completion of a message that went
-- through (delivered, sent, or received and processed).
CREATE INDEX messages_partner_success_idx ON messages (partner, completed_at)
    WHERE status IN ('delivered', 'sent', 'processed') AND completed_at IS NOT NULL;

-- A partner's messages of a status, newest first: the search for the
-- failed messages of one partner reads these only, however rare they are
-- among its messages; and the count of its messages still being worked on
-- (queued, retrying, ...).
CREATE INDEX messages_partner_status_idx ON messages (partner, status, id);

-- +goose Down
DROP INDEX messages_partner_status_idx;
DROP INDEX messages_partner_success_idx;
DROP INDEX events_message_idx;
