//go:build !race

package connector_test

// remoteRaceMemFactor is 1 without the race detector (see s3_race_test.go).
const remoteRaceMemFactor = 1
