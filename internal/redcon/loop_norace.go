//go:build !race

package redcon

// raceReleaseIO: see loop_race.go.
func raceReleaseIO() {}
