//go:build race

package ring

const raceEnabled = true
