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

-- A partner's messages still being worked on (queued, retrying, ...).
CREATE INDEX messages_partner_active_idx ON messages (partner, status)
    WHERE status IN ('queued', 'sending', 'retrying', 'awaiting-mdn');

-- +goose Down
DROP INDEX messages_partner_active_idx;
DROP INDEX messages_partner_success_idx;
DROP INDEX events_message_idx;
