package state

// The writer's encoding of the journal's files (read.go decodes them): a
// batch file, and the intents in it or alone in a single entry.

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// marshalBatch is a batch file, one intent a line.
func marshalBatch(seq uint64, ins []rebind.Intent) ([]byte, error) {
	b := fmt.Appendf(nil, "{\"version\":%d,\"seq\":%d,\"intents\":[", batchVersion, seq)
	for i, in := range ins {
		in.Version = journalVersion
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '\n')
		var err error
		if b, err = appendIntent(b, in); err != nil {
			return nil, err
		}
	}
	return append(b, "\n]}"...), nil
}

// appendIntent appends in as encoding/json writes it (json.Marshal of a
// rebind.Intent, byte for byte: TestAppendIntentIsMarshal), without
// reflection. The journal entries of a round are written before its first
// configfs write; in the guest (qemu without KVM) json.Marshal of 256
// sharers or of one port's 1,000 links cost more than the rest of the
// batch (BENCHMARKS.md).
func appendIntent(b []byte, in rebind.Intent) ([]byte, error) {
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(in.Version), 10)
	b = append(b, `,"kind":`...)
	b = appendString(b, in.Kind.String())
	b = append(b, `,"id":`...)
	b = appendString(b, in.ID)
	b = append(b, `,"address":`...)
	b = appendString(b, in.Address)
	if len(in.Links) > 0 {
		b = append(b, `,"links":[`...)
		for i, l := range in.Links {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = appendString(b, l.Name)
			b = append(b, `,"nqn":`...)
			b = appendString(b, l.NQN)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if in.ISER {
		b = append(b, `,"iser":true`...)
	}
	t, err := in.Started.MarshalJSON()
	if err != nil {
		return nil, &json.MarshalerError{Err: err}
	}
	b = append(b, `,"started":`...)
	b = append(b, t...)
	return append(b, '}'), nil
}

// appendString appends s as a JSON string the way encoding/json does: as
// it is when it holds only printable ASCII that needs no escape (names,
// addresses), else through json.Marshal.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
