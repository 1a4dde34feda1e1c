//go:build !amd64

package store

// canPrefetch: no prefetch instruction is wired up here, so Prefetch does
// nothing rather than pay for a lookup.
const canPrefetch = false

func prefetchLines(p *byte, n int) {}
