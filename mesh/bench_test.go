package mesh

import (
	"context"
	"strconv"
	"testing"

	"github.com/shade-mesh/shade/transport"
)

// BenchmarkSocketSetGet pipelines SET and GET of 4 KiB values through a
// real trainer socket, as redis-benchmark -P 16 does.
func BenchmarkSocketSetGet(b *testing.B) {
	p := startPeer(b, Config{CacheSize: 256 << 20}, transport.SocketConfig{})
	c := p.client(b)
	ctx := context.Background()
	val := make([]byte, 4096)
	for _, op := range []string{"set", "get"} {
		b.Run(op, func(b *testing.B) {
			b.SetBytes(4096)
			for i := 0; i < b.N; i += 16 {
				pipe := c.Pipeline()
				for j := 0; j < 16; j++ {
					key := "key:" + strconv.Itoa((i+j)%1000)
					if op == "set" {
						pipe.Set(ctx, key, val, 0)
					} else {
						pipe.Get(ctx, key)
					}
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
