//go:build race

package connector_test

// remoteRaceMemFactor scales the memory limit of the large-document tests under
// the race detector, whose shadow memory adds about two bytes resident for
// each byte of buffer the program writes: a connector holding its S3 parts
// (three of 8 MiB) shows three times their size.
const remoteRaceMemFactor = 3
