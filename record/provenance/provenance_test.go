package provenance

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentsandbox/agentsandbox/record"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or writes it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./record/provenance -run %s -update writes it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file; if the change is intended, run go test ./record/provenance -run %s -update and review the diff\ngot:\n%s", path, t.Name(), got)
	}
}

func indent(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// TestStatementKnownAnswer: the Statement of a fixed record and store is
// fixed, byte for byte, and its payload is canonical JSON.
func TestStatementKnownAnswer(t *testing.T) {
	f := newFixture(t)
	st, err := Build(f.store, f.id, f.wf)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	// protojson varies its whitespace from run to run; Marshal must not.
	for range 5 {
		again, err := Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, payload) {
			t.Fatalf("Marshal is not deterministic:\n%s\n%s", payload, again)
		}
	}
	if c, err := canonicalJSON(payload); err != nil || !bytes.Equal(c, payload) {
		t.Errorf("payload is not canonical JSON (%v)", err)
	}
	golden(t, "statement.golden.json", indent(t, payload))

	// What the golden file must say, whatever else changes in it.
	s := string(payload)
	for _, want := range []string{
		`"_type":"https://in-toto.io/Statement/v1"`,
		`"predicateType":"https://slsa.dev/provenance/v1"`,
		`"buildType":"https://agentsandbox.dev/buildtypes/apply/v1"`,
		`"invocationId":"` + f.id.String() + `"`,
		`"name":"build/out/a.txt"`, `"name":"build/out/sub/b.bin"`, `"name":"build/out/run.sh"`,
		`"name":"build/out/empty/.keep"`, `"name":"build/out"`, `"name":"train/model/weights.bin"`,
		`"uri":"nix-store:/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-python3-3.12.8"`,
		`"envNames":["EPOCHS","SEED"]`,
		`"startedOn":"2026-01-02T03:04:05.600Z"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("payload lacks %s", want)
		}
	}
	for _, never := range []string{`"name":"build/out/link"`, "not-selected"} {
		if strings.Contains(s, never) {
			t.Errorf("payload has %s", never)
		}
	}
}

// TestSubjectsFromNAR: each regular file by the sha256 of its bytes, each
// output by its NAR hash, a single-file output under one name with both.
func TestSubjectsFromNAR(t *testing.T) {
	f := newFixture(t)
	subs, problems := Subjects(f.store, f.rec)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	by := map[string]map[string]string{}
	var names []string
	for _, s := range subs {
		by[s.GetName()] = s.GetDigest()
		names = append(names, s.GetName())
	}
	want := []string{"build/out", "build/out/a.txt", "build/out/empty/.keep", "build/out/run.sh", "build/out/sub/b.bin", "build/report.txt", "train/model", "train/model/weights.bin"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("subjects %v, want %v", names, want)
	}
	if got, w := by["build/out/a.txt"][DigestSHA256], record.DigestOf([]byte("alpha\n")).Hex(); got != w {
		t.Errorf("a.txt sha256 %s, want %s", got, w)
	}
	out := f.rec.Steps[0].Outputs[0].NarHash
	if got := by["build/out"]; len(got) != 1 || got[DigestNAR] != record.Digest(out).Hex() {
		t.Errorf("build/out digests %v, want only %s %x", got, DigestNAR, out)
	}
	if got := by["build/report.txt"]; got[DigestSHA256] != record.DigestOf([]byte("report\n")).Hex() || got[DigestNAR] == "" {
		t.Errorf("single-file output digests %v: want its sha256 and its NAR hash", got)
	}
}

// TestPAEKnownAnswer is the example of the DSSE protocol's specification.
func TestPAEKnownAnswer(t *testing.T) {
	got := string(dsse.PAE("http://example.com/HelloWorld", []byte("hello world")))
	if want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"; got != want {
		t.Fatalf("PAE = %q, want %q", got, want)
	}
}

// TestEnvelopeKnownAnswer: ed25519 is deterministic, so a fixed key and
// payload give a fixed envelope, and the signature is ed25519 over the PAE.
func TestEnvelopeKnownAnswer(t *testing.T) {
	key := testKey()
	env, err := SignPayload(context.Background(), "http://example.com/HelloWorld", []byte("hello world"), key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := EncodeEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "envelope-ed25519.golden.json", b)
	sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if !ed25519.Verify(key.Public().(ed25519.PublicKey), []byte("DSSEv1 29 http://example.com/HelloWorld 11 hello world"), sig) {
		t.Error("the signature is not ed25519 over the PAE")
	}
	id, _ := KeyID(key.Public())
	if env.Signatures[0].KeyID != id || len(id) != 64 {
		t.Errorf("keyid %q, want %q (hex sha256 of the PKIX public key)", env.Signatures[0].KeyID, id)
	}
	// And the attestation of the fixture, signed by the same key.
	golden(t, "attestation-ed25519.golden.json", newFixture(t).attest(t, key))
}

func TestKeysRoundTrip(t *testing.T) {
	for _, kt := range KeyTypes {
		t.Run(string(kt), func(t *testing.T) {
			privPEM, pubPEM, err := GenerateKey(kt)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(privPEM, []byte("-----BEGIN PRIVATE KEY-----")) || !bytes.HasPrefix(pubPEM, []byte("-----BEGIN PUBLIC KEY-----")) {
				t.Fatalf("PEM types:\n%s%s", privPEM, pubPEM)
			}
			priv, err := ParsePrivateKey(privPEM)
			if err != nil {
				t.Fatal(err)
			}
			pub, err := ParsePublicKey(pubPEM)
			if err != nil {
				t.Fatal(err)
			}
			f := newFixture(t)
			env := f.attest(t, priv)
			if p := Verify(context.Background(), f.store, f.id, bytes.NewReader(env), pub); len(p) > 0 {
				t.Fatalf("verify: %v", p)
			}
			if _, ok := priv.(*ecdsa.PrivateKey); ok {
				// ECDSA is randomised: two signatures of one payload differ
				// and both verify.
				if bytes.Equal(env, f.attest(t, priv)) {
					t.Error("two ECDSA signatures are equal")
				}
			}
			if _, err := ParsePublicKey(privPEM); err == nil {
				t.Error("a private key parsed as a public key")
			}
			if _, err := ParsePrivateKey(pubPEM); err == nil {
				t.Error("a public key parsed as a private key")
			}
		})
	}
	if _, _, err := GenerateKey("rsa"); err == nil || !strings.Contains(err.Error(), "ecdsa-p256") {
		t.Errorf("GenerateKey(rsa) = %v, want an error naming the types", err)
	}
}

// resign re-signs f's statement after edit changes it.
func resign(t *testing.T, f *fixture, edit func(st *intoto.Statement)) []byte {
	t.Helper()
	st, err := Build(f.store, f.id, f.wf)
	if err != nil {
		t.Fatal(err)
	}
	edit(st)
	env, err := Sign(context.Background(), st, testKey())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := EncodeEnvelope(env)
	return b
}

func wantProblem(t *testing.T, problems []Problem, what string, target error) {
	t.Helper()
	for _, p := range problems {
		if strings.HasPrefix(p.What, what) && errors.Is(p.Err, target) {
			t.Logf("caught: %s", p)
			return
		}
	}
	t.Errorf("want a problem %q wrapping %v, got %v", what, target, problems)
}

func TestVerifyCatchesTampering(t *testing.T) {
	ctx := context.Background()
	pub := testKey().Public()
	t.Run("intact", func(t *testing.T) {
		f := newFixture(t)
		if p := Verify(ctx, f.store, f.id, bytes.NewReader(f.attest(t, testKey())), pub); len(p) > 0 {
			t.Fatal(p)
		}
	})
	t.Run("changed record", func(t *testing.T) {
		f := newFixture(t)
		env := f.attest(t, testKey())
		path := f.store.RecordPath(f.id)
		b, _ := os.ReadFile(path)
		b = bytes.Replace(b, []byte(`"exitCode":0`), []byte(`"exitCode":1`), 1)
		os.Chmod(path, 0o644)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		wantProblem(t, Verify(ctx, f.store, f.id, bytes.NewReader(env), pub), "record", record.ErrHashMismatch)
	})
	t.Run("another record", func(t *testing.T) {
		f := newFixture(t)
		env := f.attest(t, testKey())
		other := *f.rec
		other.Status = record.StatusFailed
		other.Steps = append([]record.Step(nil), f.rec.Steps...)
		other.Steps[1].Outputs = nil
		id, err := f.store.Put(&other)
		if err != nil {
			t.Fatal(err)
		}
		p := Verify(ctx, f.store, id, bytes.NewReader(env), pub)
		wantProblem(t, p, "invocation id", ErrInvocation)
		wantProblem(t, p, "subject train/model", ErrSubjectExtra)
	})
	t.Run("changed blob", func(t *testing.T) {
		f := newFixture(t)
		env := f.attest(t, testKey())
		blob := f.store.BlobPath(f.rec.Steps[1].Outputs[0].NarHash.Blob())
		b, _ := os.ReadFile(blob)
		b = bytes.Replace(b, []byte("0123456789"), []byte("0123456780"), 1)
		os.Chmod(blob, 0o644)
		if err := os.WriteFile(blob, b, 0o644); err != nil {
			t.Fatal(err)
		}
		p := Verify(ctx, f.store, f.id, bytes.NewReader(env), pub)
		wantProblem(t, p, "subject train/model", record.ErrHashMismatch)
		if len(p) != 1 {
			t.Errorf("want one problem (the damaged output), got %v", p)
		}
	})
	t.Run("changed subject", func(t *testing.T) {
		f := newFixture(t)
		env := resign(t, f, func(st *intoto.Statement) {
			st.Subject[1].Digest[DigestSHA256] = strings.Repeat("0", 64)
		})
		wantProblem(t, Verify(ctx, f.store, f.id, bytes.NewReader(env), pub), "subject build/out/a.txt", ErrSubjectDiffer)
	})
	t.Run("missing subject", func(t *testing.T) {
		f := newFixture(t)
		env := resign(t, f, func(st *intoto.Statement) { st.Subject = st.Subject[:len(st.Subject)-1] })
		wantProblem(t, Verify(ctx, f.store, f.id, bytes.NewReader(env), pub), "subject train/model/weights.bin", ErrSubjectAbsent)
	})
	t.Run("extra subject", func(t *testing.T) {
		f := newFixture(t)
		env := resign(t, f, func(st *intoto.Statement) {
			st.Subject = append(st.Subject, &intoto.ResourceDescriptor{Name: "train/model/backdoor", Digest: map[string]string{DigestSHA256: strings.Repeat("1", 64)}})
		})
		wantProblem(t, Verify(ctx, f.store, f.id, bytes.NewReader(env), pub), "subject train/model/backdoor", ErrSubjectExtra)
	})
	t.Run("changed payload byte", func(t *testing.T) {
		f := newFixture(t)
		var env dsse.Envelope
		if err := json.Unmarshal(f.attest(t, testKey()), &env); err != nil {
			t.Fatal(err)
		}
		payload, _ := base64.StdEncoding.DecodeString(env.Payload)
		payload = bytes.Replace(payload, []byte(`"name":"build/out/a.txt"`), []byte(`"name":"build/out/b.txt"`), 1)
		env.Payload = base64.StdEncoding.EncodeToString(payload)
		b, _ := EncodeEnvelope(&env)
		wantProblem(t, Verify(ctx, f.store, f.id, bytes.NewReader(b), pub), "signature", ErrSignature)
	})
	t.Run("wrong key", func(t *testing.T) {
		f := newFixture(t)
		_, otherPEM, err := GenerateKey(ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		other, err := ParsePublicKey(otherPEM)
		if err != nil {
			t.Fatal(err)
		}
		wantProblem(t, Verify(ctx, f.store, f.id, bytes.NewReader(f.attest(t, testKey())), other), "signature", ErrSignature)
	})
	t.Run("wrong payload type", func(t *testing.T) {
		f := newFixture(t)
		st, _ := Build(f.store, f.id, f.wf)
		payload, _ := Marshal(st)
		env, _ := SignPayload(ctx, "application/json", payload, testKey())
		b, _ := EncodeEnvelope(env)
		wantProblem(t, Verify(ctx, f.store, f.id, bytes.NewReader(b), pub), "payload type", ErrPayloadType)
	})
	t.Run("wrong predicate type", func(t *testing.T) {
		f := newFixture(t)
		env := resign(t, f, func(st *intoto.Statement) { st.PredicateType = "https://slsa.dev/provenance/v0.2" })
		wantProblem(t, Verify(ctx, f.store, f.id, bytes.NewReader(env), pub), "statement", ErrPredicate)
	})
	t.Run("wrong build type", func(t *testing.T) {
		f := newFixture(t)
		env := resign(t, f, func(st *intoto.Statement) {
			st.Predicate.Fields["buildDefinition"].GetStructValue().Fields["buildType"] = structpb.NewStringValue("https://example.org/other/v1")
		})
		wantProblem(t, Verify(ctx, f.store, f.id, bytes.NewReader(env), pub), "statement", ErrPredicate)
	})
	t.Run("changed record byproduct", func(t *testing.T) {
		f := newFixture(t)
		env := resign(t, f, func(st *intoto.Statement) {
			for _, bp := range st.Predicate.Fields["runDetails"].GetStructValue().Fields["byproducts"].GetListValue().Values {
				if d := bp.GetStructValue().Fields["digest"].GetStructValue(); bp.GetStructValue().Fields["name"].GetStringValue() == "record" {
					d.Fields[DigestSHA256] = structpb.NewStringValue(strings.Repeat("2", 64))
				}
			}
		})
		wantProblem(t, Verify(ctx, f.store, f.id, bytes.NewReader(env), pub), "byproduct record", ErrInvocation)
	})
	t.Run("not an envelope", func(t *testing.T) {
		f := newFixture(t)
		wantProblem(t, Verify(ctx, f.store, f.id, strings.NewReader(`{"payloadType":"x","payload":"","signatures":[],"extra":1}`), pub), "envelope", ErrEnvelope)
	})
}

// TestNoOutputs: a record without outputs cannot be attested, and says why.
func TestNoOutputs(t *testing.T) {
	f := newFixture(t)
	r := *f.rec
	r.Steps = []record.Step{f.rec.Steps[2]}
	id, err := f.store.Put(&r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(f.store, id, nil); !errors.Is(err, ErrNoSubjects) {
		t.Fatalf("Build = %v, want ErrNoSubjects", err)
	}
}

// TestBuildRefusesDamage: a changed output blob is not attested.
func TestBuildRefusesDamage(t *testing.T) {
	f := newFixture(t)
	blob := f.store.BlobPath(f.rec.Steps[0].Outputs[0].NarHash.Blob())
	b, _ := os.ReadFile(blob)
	os.Chmod(blob, 0o644)
	if err := os.WriteFile(blob, bytes.Replace(b, []byte("alpha"), []byte("alphA"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Build(f.store, f.id, f.wf)
	if !errors.Is(err, record.ErrHashMismatch) || !strings.Contains(err.Error(), "subject build/out") {
		t.Fatalf("Build = %v, want a hash mismatch naming build/out", err)
	}
}
