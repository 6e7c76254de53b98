package state

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nvmet-rebind/nvmet-rebind/configfs"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// TestAppendIntentIsMarshal: the journal's encoder writes what json.Marshal
// writes, byte for byte, for intents of every shape: names with quotes,
// backslashes, HTML characters, control bytes, non-ASCII and invalid
// UTF-8; no links, one, many; iser; times with and without a zone and
// nanoseconds; kinds known and not; and a year json refuses.
func TestAppendIntentIsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"", "a", "nqn.2024-01.lab:vol-1", "192.0.2.1:4420", "[2001:db8::1]:3260", `"`, `\`, "<", ">", "&",
		"\x00", "\x1f", "\x7f", "é", "\xff", "\u2028", "\u2029", "/", " ", "iqn.2024-01.io.e2e:scale-1/tpgt_1/192.0.2.1:3260"}
	str := func() string {
		s := ""
		for range r.IntN(4) {
			s += pieces[r.IntN(len(pieces))]
		}
		return s
	}
	zones := []*time.Location{time.UTC, time.FixedZone("x", -5*3600-30*60), time.FixedZone("y", 14*3600)}
	for i := range 5000 {
		in := rebind.Intent{Version: r.IntN(3), Kind: rebind.Kind(r.IntN(6)), ID: str(), Address: str(), ISER: r.IntN(2) == 0,
			Started: time.Unix(r.Int64N(1<<35)-1<<34, r.Int64N(1e9)*int64(r.IntN(2))).In(zones[r.IntN(len(zones))])}
		for range r.IntN(3) * r.IntN(3) {
			in.Links = append(in.Links, configfs.Link{Name: str(), NQN: str()})
		}
		if i%7 == 0 {
			in.Links = []configfs.Link{} // empty, not nil: omitted as well
		}
		if i%101 == 0 {
			in.Started = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // json refuses the year
		}
		want, werr := json.Marshal(in)
		got, gerr := appendIntent([]byte("prefix"), in)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%#v: json.Marshal error %v, appendIntent error %v", in, werr, gerr)
		}
		if werr != nil {
			continue
		}
		if string(got) != "prefix"+string(want) {
			t.Fatalf("%#v:\nappendIntent %s\njson.Marshal %s", in, got[len("prefix"):], want)
		}
	}
}
