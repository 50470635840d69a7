// Package hub holds the domain types and sentinel errors that several of
// edihub's packages share: the store (internal/postgres) reads and writes
// them, and the domain packages (leader, mdn, outbox, report, ...) pass
// them around and match them.
//
// What belongs here: plain types, their small pure methods, and the errors
// that classify an answer, when more than one package outside the store
// uses them. What does not: anything that needs I/O, a clock, a database
// or a network, and types one package and the store share (they stay with
// that package or the store). The package imports only the standard
// library, so every package of the module can import it without a cycle.
package hub
