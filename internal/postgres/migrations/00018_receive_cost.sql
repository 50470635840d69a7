-- What PostgreSQL spends on each received message (issue 22, target 4:
-- at most 0.2 ms of its CPU per message; docs/performance.md has the
-- figures and how they were measured).

-- +goose Up

-- The received event. The receiver's statement writes it itself (a
-- data-modifying WITH beside the message's, internal/postgres
-- insertMessageCTE): firing the PL/pgSQL AFTER ROW trigger of 00005 took
-- about 15 % of the receipt's PostgreSQL CPU. The trigger stays for
-- every other insert of a processed inbound message (an edihub of an
-- earlier release still running during a rolling update, SQL written by
-- hand) and skips the statements that say they write the event: their
-- text, current_query() (the statement the client sent, whatever the
-- plan), holds the marker that internal/postgres receivedEventMarker
-- appends. The WHEN clause is evaluated by the executor without calling
-- the function, so skipping costs a fraction of firing (the clause's
-- preparation for each statement: a tenth of the receipt's cost, the
-- price of not losing the events of replicas not yet updated; a later
-- migration may drop the trigger). coalesce: a session without a client
-- statement (none inserts messages) writes the event.
DROP TRIGGER messages_event_insert ON messages;
CREATE TRIGGER messages_event_insert AFTER INSERT ON messages
    FOR EACH ROW WHEN (NEW.direction = 'inbound' AND NEW.status = 'processed'
        AND coalesce(strpos(current_query(), '/* edihub: this statement writes the received event */'), 0) = 0)
    EXECUTE FUNCTION edihub_message_event();

-- Each inbound message updated 9 of the 13 indexes of messages (the
-- partial ones hold none of its rows). Three of them go:
--
-- messages_status_idx (direction, status), of 00001: every query with a
-- status reads messages_status_id_idx (status, id) of 00011 or a narrower
-- one instead.
DROP INDEX messages_status_idx;

-- messages_message_id_idx (message_id), of 00011, the search by
-- Message-ID: the unique index of a partner's Message-IDs now leads with
-- the Message-ID and serves it (the duplicate check names all three
-- columns, in any order; nothing reads a partner's and direction's rows
-- through it).
CREATE UNIQUE INDEX messages_message_id_partner_direction_key ON messages (message_id, partner, direction);
ALTER TABLE messages
    DROP CONSTRAINT messages_partner_direction_message_id_key,
    ADD CONSTRAINT messages_message_id_partner_direction_key UNIQUE USING INDEX messages_message_id_partner_direction_key;
DROP INDEX messages_message_id_idx;

-- messages_filename_idx, the search by file name prefix, keeps only the
-- messages that have a file name (the search asks for filename <> ''
-- besides its range): most received messages have none.
DROP INDEX messages_filename_idx;
CREATE INDEX messages_filename_idx ON messages (filename text_pattern_ops) WHERE filename <> '';

-- Bodies. A value that makes a row larger than toast_tuple_target (2 kB by
-- default) is compressed, pglz unless said otherwise, and stored in the
-- TOAST table if still too large: pglz took 13 % of PostgreSQL's CPU of
-- a receipt, the TOAST insert of the MDN 6 %. Payloads are compressed
-- with lz4 (where the server has it: PostgreSQL 14 and later built with
-- lz4, as the distributions' packages are), several times faster for
-- about a tenth more on disk on EDI; rows stored before keep pglz, both
-- are read alike. MDNs (a few kB, mostly base64 that
-- compresses little) stay in their row uncompressed up to the 8 kB page.
-- Both apply to rows written from now on; nothing is rewritten.
-- +goose StatementBegin
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 AND EXISTS (
        SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE payloads ALTER COLUMN data SET COMPRESSION lz4;
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE mdns SET (toast_tuple_target = 8160);

-- The foreign keys of payloads and mdns to messages: checking one is a
-- query of its own (a lookup of the message row and a lock on it, taken
-- through SPI) for each row inserted: put back, the two cost a receipt
-- a fifth more than it costs without them. Every such row is written in the transaction that
-- inserts its message (the receipt, the outbound enqueue) or, for the MDN
-- of an outbound message, beside an update of the message row (the
-- dispatcher's, with the message's outbox row claimed, so that the
-- purger leaves it alone; the MDN poller's, in the statement whose UPDATE
-- … RETURNING names the message): none names a message that is not
-- there. What the keys did on delete, ON DELETE CASCADE, is done by a
-- trigger for each DELETE statement on messages (the purger's batches,
-- the replacement of a failed receipt, SQL written by hand): it deletes
-- the payloads (and with them their payload_chunks, whose key to
-- payloads stays) and MDNs of the rows the statement deleted, in the
-- same transaction.
ALTER TABLE payloads DROP CONSTRAINT payloads_message_id_fkey;
ALTER TABLE mdns DROP CONSTRAINT mdns_message_id_fkey;
-- +goose StatementBegin
CREATE FUNCTION edihub_message_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM payloads WHERE message_id IN (SELECT id FROM gone);
    DELETE FROM mdns WHERE message_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER messages_delete_bodies AFTER DELETE ON messages
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION edihub_message_delete();

-- +goose Down
DROP TRIGGER messages_delete_bodies ON messages;
DROP FUNCTION edihub_message_delete();
DELETE FROM payloads p WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = p.message_id);
DELETE FROM mdns d WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = d.message_id);
ALTER TABLE payloads ADD CONSTRAINT payloads_message_id_fkey FOREIGN KEY (message_id) REFERENCES messages (id) ON DELETE CASCADE;
ALTER TABLE mdns ADD CONSTRAINT mdns_message_id_fkey FOREIGN KEY (message_id) REFERENCES messages (id) ON DELETE CASCADE;
ALTER TABLE mdns RESET (toast_tuple_target);
-- +goose StatementBegin
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 THEN
        ALTER TABLE payloads ALTER COLUMN data SET COMPRESSION default;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX messages_filename_idx;
CREATE INDEX messages_filename_idx ON messages (filename text_pattern_ops);
CREATE INDEX messages_message_id_idx ON messages (message_id);
CREATE UNIQUE INDEX messages_partner_direction_message_id_key ON messages (partner, direction, message_id);
ALTER TABLE messages
    DROP CONSTRAINT messages_message_id_partner_direction_key,
    ADD CONSTRAINT messages_partner_direction_message_id_key UNIQUE USING INDEX messages_partner_direction_message_id_key;
CREATE INDEX messages_status_idx ON messages (direction, status);
DROP TRIGGER messages_event_insert ON messages;
CREATE TRIGGER messages_event_insert AFTER INSERT ON messages
    FOR EACH ROW WHEN (NEW.direction = 'inbound' AND NEW.status = 'processed')
    EXECUTE FUNCTION edihub_message_event();
