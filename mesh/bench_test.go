package mesh

import (
	"context"
	"strconv"
	"testing"

	"github.com/shade-mesh/shade/transport"
)

// BenchmarkSocketSetGet pipelines SET and GET of 4 KiB and 100 KiB values
// through a real trainer socket, 16 commands a round trip, as
// redis-benchmark -P 16 does. The go-redis client runs in the same
// process, so its work counts too; ns/op is per command.
func BenchmarkSocketSetGet(b *testing.B) {
	p := startPeer(b, Config{CacheSize: 256 << 20}, transport.SocketConfig{})
	c := p.client(b)
	ctx := context.Background()
	for _, size := range []struct {
		name  string
		bytes int
	}{{"4KiB", 4 << 10}, {"100KiB", 100 << 10}} {
		val := make([]byte, size.bytes)
		for _, op := range []string{"set", "get"} {
			b.Run(size.name+"/"+op, func(b *testing.B) {
				b.SetBytes(int64(size.bytes))
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
}
