package provenance

import (
	"bytes"
	"context"
	"encoding/base64"
	"testing"
)

// FuzzVerify feeds envelopes to Verify against a fixture's record. It must
// never panic, and anything it accepts must carry exactly the payload the
// fixture's key signed (ed25519 is deterministic, so there is one).
func FuzzVerify(f *testing.F) {
	fx := newFixture(f)
	good := fx.attest(f, testKey())
	f.Add(good)
	f.Add(bytes.Replace(good, []byte(`"keyid"`), []byte(`"keyId"`), 1))
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"keyid":"","sig":"AA=="}]}`))
	f.Add([]byte(`{}`))
	env, err := DecodeEnvelope(bytes.NewReader(good))
	if err != nil {
		f.Fatal(err)
	}
	want, _ := base64.StdEncoding.DecodeString(env.Payload)
	pub := testKey().Public()
	f.Fuzz(func(t *testing.T, b []byte) {
		problems := Verify(context.Background(), fx.store, fx.id, bytes.NewReader(b), pub)
		if len(problems) > 0 {
			return
		}
		got, err := DecodeEnvelope(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("Verify accepted what DecodeEnvelope refuses: %v", err)
		}
		payload, err := got.DecodeB64Payload()
		if err != nil || !bytes.Equal(payload, want) || got.PayloadType != PayloadType {
			t.Fatalf("Verify accepted another payload (%v):\n%s", err, payload)
		}
	})
}
