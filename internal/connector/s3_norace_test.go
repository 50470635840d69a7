//go:build !race

package connector_test

// raceMemFactor is 1 without the race detector (see s3_race_test.go).
const raceMemFactor = 1
