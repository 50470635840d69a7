//go:build race

package edi_test

// raceSlack is what the race detector adds to an allocation count: it
// drops a quarter of sync.Pool's Puts on purpose (the reused reader is
// then made again) and makes some values escape that otherwise stay on
// the stack.
const raceSlack = 4

// bigInterchange is 64 MiB under the race detector, which makes reading
// about twenty times slower; the bound checked is the same.
const bigInterchange = 64 << 20
