-- EDI envelopes (issue 23): the interchanges each message carries, their
-- functional groups, duplicate interchanges, the per-partner counter of
-- acknowledgement control numbers, and the acknowledgement state of what
-- we sent.

-- +goose Up

-- One row per interchange (ISA…IEA, UNB…UNZ) of a received or sent
-- message, written with the message's envelope read by internal/edi.
-- ok: every trailer agrees with its header. duplicate_of: the earlier
-- message that carried the same interchange (same partner, direction,
-- sender, receiver and control number) within the partner's window.
-- ack_status (outbound only): '' none expected, pending (due at
-- ack_due_at), accepted, accepted-with-errors, rejected; ack_overdue is
-- set once by the leader's acknowledgement watcher, fenced.
CREATE TABLE message_interchanges (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id          bigint      NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    partner             text        NOT NULL,
    direction           text        NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    standard            text        NOT NULL CHECK (standard IN ('X12', 'EDIFACT')),
    sender_qualifier    text        NOT NULL DEFAULT '',
    sender_id           text        NOT NULL,
    receiver_qualifier  text        NOT NULL DEFAULT '',
    receiver_id         text        NOT NULL,
    control_number      text        NOT NULL,
    version             text        NOT NULL DEFAULT '',
    test                boolean     NOT NULL DEFAULT false,
    ok                  boolean     NOT NULL,
    problems            text[]      NOT NULL DEFAULT '{}',
    group_count         integer     NOT NULL DEFAULT 0,
    set_count           integer     NOT NULL DEFAULT 0,
    set_types           text[]      NOT NULL DEFAULT '{}',
    ack_kinds           text[]      NOT NULL DEFAULT '{}',
    duplicate_of        bigint,
    ack_status          text        NOT NULL DEFAULT ''
        CHECK (ack_status IN ('', 'pending', 'accepted', 'accepted-with-errors', 'rejected')),
    ack_codes           text[]      NOT NULL DEFAULT '{}',
    ack_due_at          timestamptz,
    ack_overdue         boolean     NOT NULL DEFAULT false,
    ack_fence           bigint,
    acked_at            timestamptz,
    ack_message         bigint,
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX message_interchanges_message_idx ON message_interchanges (message_id);
-- Search by interchange control number (API icn=, console).
CREATE INDEX message_interchanges_control_idx ON message_interchanges (control_number);
-- Duplicate detection and CONTRL reconciliation.
CREATE INDEX message_interchanges_duplicate_idx
    ON message_interchanges (partner, direction, sender_id, receiver_id, control_number, created_at);
-- The acknowledgement watcher: pending ones by due time.
CREATE INDEX message_interchanges_ack_due_idx ON message_interchanges (ack_due_at)
    WHERE ack_status = 'pending' AND NOT ack_overdue;
-- edihub_ack_overdue{partner}: flagged and still unacknowledged.
CREATE INDEX message_interchanges_overdue_idx ON message_interchanges (partner)
    WHERE ack_overdue AND ack_status = 'pending';

-- The functional groups of outbound interchanges: X12 997/999 name the
-- group (AK102), not the interchange.
CREATE TABLE message_groups (
    interchange_id  bigint  NOT NULL REFERENCES message_interchanges (id) ON DELETE CASCADE,
    partner         text    NOT NULL,
    functional_id   text    NOT NULL,
    control_number  text    NOT NULL,
    set_count       integer NOT NULL,
    ack_status      text    NOT NULL DEFAULT '',
    ack_codes       text[]  NOT NULL DEFAULT '{}',
    PRIMARY KEY (interchange_id, control_number)
);
CREATE INDEX message_groups_partner_control_idx ON message_groups (partner, control_number);

-- Each duplicate interchange received, for the report (counted also when
-- refused). Rows go with the message that carried the duplicate (the
-- purger's message retention).
CREATE TABLE interchange_duplicates (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id      bigint      NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    partner         text        NOT NULL,
    control_number  text        NOT NULL,
    refused         boolean     NOT NULL,
    at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX interchange_duplicates_at_idx ON interchange_duplicates (at);
CREATE INDEX interchange_duplicates_message_idx ON interchange_duplicates (message_id);

-- The last acknowledgement control number given per partner. Taken with
-- an upsert whose row lock serialises replicas: committed numbers never
-- repeat, across replicas and failovers (wrapping after 999999999).
CREATE TABLE edi_control_numbers (
    partner  text   PRIMARY KEY,
    last     bigint NOT NULL CHECK (last BETWEEN 1 AND 999999999)
);

ALTER TABLE events DROP CONSTRAINT events_type_check;
ALTER TABLE events ADD CONSTRAINT events_type_check
    CHECK (type IN ('received', 'sent', 'delivered', 'failed', 'overdue', 'ack', 'ack-overdue'));

-- +goose Down
DELETE FROM events WHERE type IN ('ack', 'ack-overdue');
ALTER TABLE events DROP CONSTRAINT events_type_check;
ALTER TABLE events ADD CONSTRAINT events_type_check
    CHECK (type IN ('received', 'sent', 'delivered', 'failed', 'overdue'));
DROP TABLE edi_control_numbers;
DROP TABLE interchange_duplicates;
DROP TABLE message_groups;
DROP TABLE message_interchanges;
