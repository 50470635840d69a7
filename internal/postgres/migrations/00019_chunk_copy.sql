-- Payloads and built bodies stored in pieces (payload_chunks of 00015,
-- outbox_body_chunks of 00016) are written by binary COPY, 1 MiB a row
-- (issue 22, the large send). COPY inserts rows in batches: it buffers
-- them until 1000 are buffered or their input passes 64 kB, but in the
-- binary format (the one pgx and the freeze send) a row's input counts
-- for nothing, so the server held up to 1000 rows of 1 MiB, a GiB of its
-- memory, and inserted them only when the COPY ended (or every 1000
-- rows): the freeze of a built body did its writes after the build
-- instead of beside it (the "freeze" of the "built as a stream" log),
-- and an upload of a large document held that much memory in its server
-- process. A BEFORE ROW trigger makes COPY insert each row as it reads
-- it (COPY does not batch into a table that has one); the trigger does
-- nothing else: one PL/pgSQL call a row of 1 MiB, lost in the cost of
-- writing the row (TestMigration00019OnExistingData checks that the rows
-- reach the table while the COPY is open). Nothing is rewritten.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION edihub_insert_row_by_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER payload_chunks_row_by_row BEFORE INSERT ON payload_chunks
    FOR EACH ROW EXECUTE FUNCTION edihub_insert_row_by_row();
CREATE TRIGGER outbox_body_chunks_row_by_row BEFORE INSERT ON outbox_body_chunks
    FOR EACH ROW EXECUTE FUNCTION edihub_insert_row_by_row();

-- +goose Down
DROP TRIGGER outbox_body_chunks_row_by_row ON outbox_body_chunks;
DROP TRIGGER payload_chunks_row_by_row ON payload_chunks;
DROP FUNCTION edihub_insert_row_by_row();
