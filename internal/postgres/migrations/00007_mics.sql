-- The MIC of an outbound message in every supported algorithm, computed
-- when it is built: a partner may answer with its MIC in another
-- algorithm than the one asked for, and the MIC of an encrypted message
-- covers the content before encryption, which is not stored. Each element
-- is in Received-content-MIC form ("base64, sha-384"). It lives on the
-- outbox row only, with the bytes sent: the row is kept while its message
-- awaits an MDN. Empty for messages built before this migration (those are
-- recomputed from the bytes sent when unencrypted).

-- +goose Up
ALTER TABLE outbox ADD COLUMN mics text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE outbox DROP COLUMN mics;
