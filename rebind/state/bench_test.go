package state_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
	"github.com/nvmet-rebind/nvmet-rebind/rebind/state"
)

// BenchmarkPutAll: journaling the heals of one round (the sharers of a
// shared iSER portal, or every nvmet port on a reset device), syncing and
// removing them, in the directory the test gets (put TMPDIR on the disk
// to measure: the fsyncs are the cost). put-µs is PutAll alone: what the
// heal's first configfs write waits for (the fsyncs come after, in Sync).
func BenchmarkPutAll(b *testing.B) {
	for _, n := range []int{1, 32, 256} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, err := state.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			ins := make([]rebind.Intent, n)
			keys := make([]rebind.Key, n)
			for i := range ins {
				id := fmt.Sprint(i + 1)
				ins[i] = rebind.Intent{Kind: rebind.KindNvmet, ID: id, Address: "192.0.2.1:4420",
					Links: []configfs.Link{{Name: "nqn.2024-01.lab:a", NQN: "nqn.2024-01.lab:a"}}}
				keys[i] = rebind.Key{Kind: rebind.KindNvmet, ID: id}
			}
			var put time.Duration
			for b.Loop() {
				t := time.Now()
				if err := s.PutAll(ins); err != nil {
					b.Fatal(err)
				}
				put += time.Since(t)
				if err := s.Sync(); err != nil {
					b.Fatal(err)
				}
				if err := s.DeleteAll(keys); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(put.Microseconds())/float64(b.N), "put-µs")
		})
	}
}
