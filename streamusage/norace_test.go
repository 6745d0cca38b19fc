//go:build !race

package streamusage

const raceEnabled = false
