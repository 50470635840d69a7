//go:build !race

package edi_test

// raceSlack is 0 without the race detector (race_test.go).
const raceSlack = 0
