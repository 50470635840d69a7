-- What PostgreSQL spends on each received message, continued (issue 22,
-- target 4: at most 0.2 ms of its CPU per message; docs/performance.md).

-- +goose Up

-- The created_at indexes of events, payloads and mdns (00005) were read
-- by the purger alone, to find the oldest rows, and each receipt added
-- an entry to all three (3 of its 14 index insertions). The purger now
-- walks payloads and mdns by their primary keys (the message's id) and
-- events by events_message_idx (message, id), up to the first message
-- created at or after its cutoff, which messages_created_at_id_idx
-- finds: message ids follow the messages' creation, and a message's
-- payload, MDN and events are never older than it (internal/postgres
-- purgeBound). A purger of a release before this one still leading
-- during a rolling update purges these tables by sorting them instead:
-- slower, not wrong.
DROP INDEX events_created_at_idx;
DROP INDEX payloads_created_at_idx;
DROP INDEX mdns_created_at_idx;

-- +goose Down
CREATE INDEX mdns_created_at_idx ON mdns (created_at);
CREATE INDEX payloads_created_at_idx ON payloads (created_at);
CREATE INDEX events_created_at_idx ON events (created_at);
