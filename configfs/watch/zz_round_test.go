package watch

import (
	"io"
	"log/slog"
	"testing"
)

func BenchmarkZZRound(b *testing.B) {
	k := benchTree(b, 4096)
	m, err := New(k.FS(), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RescanEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for b.Loop() {
		ps, _ := m.Ports()
		for _, p := range ps {
			m.Links(p.ID)
		}
		m.Portals()
		m.Subsystems()
	}
}
