package provenance

import (
	"bytes"
	"context"
	"crypto"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentsandbox/agentsandbox/record"
)

// PayloadType is the DSSE payload type of an in-toto Statement.
const PayloadType = "application/vnd.in-toto+json"

// MaxEnvelope bounds the envelope DecodeEnvelope reads: an attestation of
// a large closure and many outputs is a few MiB.
const MaxEnvelope = 64 << 20

// Errors a Problem wraps, for errors.Is.
var (
	ErrEnvelope      = errors.New("not a DSSE envelope")
	ErrPayloadType   = errors.New("wrong payload type")
	ErrSignature     = errors.New("no signature verifies with the key")
	ErrStatement     = errors.New("not an in-toto Statement v1")
	ErrPredicate     = errors.New("not SLSA provenance v1 of this build type")
	ErrInvocation    = errors.New("the attestation is of another record")
	ErrSubjectDiffer = errors.New("subject digest differs from the store")
	ErrSubjectAbsent = errors.New("output file missing from the attestation")
	ErrSubjectExtra  = errors.New("subject is not an output of the record")
)

// Sign makes the DSSE envelope of st: its canonical JSON (Marshal) as the
// payload, one signature by key, whose keyid is KeyID of its public key.
func Sign(ctx context.Context, st *intoto.Statement, key crypto.Signer) (*dsse.Envelope, error) {
	payload, err := Marshal(st)
	if err != nil {
		return nil, err
	}
	return SignPayload(ctx, PayloadType, payload, key)
}

// SignPayload signs any payload as DSSE does: the signature is over
// PAE(payloadType, payload).
func SignPayload(ctx context.Context, payloadType string, payload []byte, key crypto.Signer) (*dsse.Envelope, error) {
	s, err := newSigner(key)
	if err != nil {
		return nil, err
	}
	es, err := dsse.NewEnvelopeSigner(s)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	env, err := es.SignPayload(ctx, payloadType, payload)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return env, nil
}

// EncodeEnvelope is the envelope as indented JSON and a newline, the form
// `records attest` writes.
func EncodeEnvelope(env *dsse.Envelope) ([]byte, error) {
	b, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return append(b, '\n'), nil
}

// DecodeEnvelope parses an envelope strictly: one JSON object with the
// DSSE fields and nothing else, at most MaxEnvelope bytes, at least one
// signature.
func DecodeEnvelope(r io.Reader) (*dsse.Envelope, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxEnvelope+1))
	if err != nil {
		return nil, fmt.Errorf("read envelope: %w", err)
	}
	if len(b) > MaxEnvelope {
		return nil, fmt.Errorf("read envelope: %w: over %d bytes", ErrEnvelope, MaxEnvelope)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var env dsse.Envelope
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("read envelope: %w: %v", ErrEnvelope, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("read envelope: %w: data after the JSON object", ErrEnvelope)
	}
	if len(env.Signatures) == 0 {
		return nil, fmt.Errorf("read envelope: %w: no signatures", ErrEnvelope)
	}
	return &env, nil
}

// Open checks that a signature in env verifies with pub over the PAE of
// its payload type and payload, and returns the payload. It does not look
// at the payload type or the payload.
func Open(ctx context.Context, env *dsse.Envelope, pub crypto.PublicKey) ([]byte, error) {
	v, err := newVerifier(pub)
	if err != nil {
		return nil, err
	}
	ev, err := dsse.NewEnvelopeVerifier(v)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	_, payload, err := ev.VerifyAndDecode(ctx, env)
	if err == nil {
		return payload, nil
	}
	var ids []string
	for _, s := range env.Signatures {
		if s.KeyID == v.id {
			// The library's own error adds nothing to this.
			return nil, fmt.Errorf("%w %s: the signature by this key does not match the payload; the envelope was changed after it was signed", ErrSignature, v.id)
		}
		ids = append(ids, fmt.Sprintf("%q", s.KeyID))
	}
	return nil, fmt.Errorf("%w %s: the envelope is signed by keyid %s; is this the public key of the key that signed it?", ErrSignature, v.id, strings.Join(ids, ", "))
}

// ParseStatement parses a payload as an in-toto Statement v1 with a SLSA
// provenance v1 predicate of BuildType, strictly (unknown fields are
// errors), and checks both with their validators.
func ParseStatement(payload []byte) (*intoto.Statement, *slsa.Provenance, error) {
	var st intoto.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrStatement, err)
	}
	if st.GetType() != StatementType {
		return nil, nil, fmt.Errorf("%w: _type is %q, want %q", ErrStatement, st.GetType(), StatementType)
	}
	if err := st.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrStatement, err)
	}
	if st.GetPredicateType() != PredicateType {
		return nil, nil, fmt.Errorf("%w: predicateType is %q, want %q", ErrPredicate, st.GetPredicateType(), PredicateType)
	}
	b, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrPredicate, err)
	}
	var p slsa.Provenance
	if err := protojson.Unmarshal(b, &p); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrPredicate, err)
	}
	if err := p.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrPredicate, err)
	}
	if bt := p.GetBuildDefinition().GetBuildType(); bt != BuildType {
		return nil, nil, fmt.Errorf("%w: buildType is %q, want %q", ErrPredicate, bt, BuildType)
	}
	return &st, &p, nil
}

// Verify checks envelope, an attestation of record id, against the public
// key pub, the record and the store: the DSSE signature over the PAE, the
// payload type, the Statement and predicate types, that the invocation id
// is id and the record byproduct its digest, and that the subjects are
// exactly those Subjects finds in the store now (every NAR walked again).
// It returns one Problem per failure, naming it; none means the
// attestation holds for the store as it is. It does not re-check the
// record's other blobs: record.Store.Verify does.
func Verify(ctx context.Context, s *record.Store, id record.ID, envelope io.Reader, pub crypto.PublicKey) []Problem {
	env, err := DecodeEnvelope(envelope)
	if err != nil {
		return []Problem{{What: "envelope", Err: err}}
	}
	var problems []Problem
	if env.PayloadType != PayloadType {
		problems = append(problems, Problem{What: "payload type", Err: fmt.Errorf("%w: %q, want %q", ErrPayloadType, env.PayloadType, PayloadType)})
	}
	payload, err := Open(ctx, env, pub)
	if err != nil {
		// Nothing in an unsigned payload is worth reading.
		return append(problems, Problem{What: "signature", Err: err})
	}
	if len(problems) > 0 {
		return problems
	}
	st, p, err := ParseStatement(payload)
	if err != nil {
		return []Problem{{What: "statement", Err: err}}
	}
	if got := p.GetRunDetails().GetMetadata().GetInvocationId(); got != id.String() {
		problems = append(problems, Problem{What: "invocation id", Err: fmt.Errorf("%w: runDetails.metadata.invocationId is %q, want %s", ErrInvocation, got, id)})
	}
	recordDigest := ""
	for _, bp := range p.GetRunDetails().GetByproducts() {
		if bp.GetName() == "record" {
			recordDigest = bp.GetDigest()[DigestSHA256]
		}
	}
	if want := hex.EncodeToString(id[:]); recordDigest != want {
		problems = append(problems, Problem{What: "byproduct record", Err: fmt.Errorf("%w: its sha256 is %q, the record's canonical bytes hash to %s", ErrInvocation, recordDigest, want)})
	}
	r, err := s.Get(id)
	if err != nil {
		return append(problems, Problem{What: "record", Err: err})
	}
	want, walkProblems := Subjects(s, r)
	problems = append(problems, walkProblems...)
	failed := map[string]bool{} // outputs that could not be read
	for _, wp := range walkProblems {
		failed[strings.TrimPrefix(wp.What, "subject ")] = true
	}
	under := func(name string) bool {
		for f := range failed {
			if name == f || strings.HasPrefix(name, f+"/") {
				return true
			}
		}
		return false
	}
	return append(problems, compareSubjects(st.GetSubject(), want, under)...)
}

// compareSubjects reports every difference between the subjects an
// attestation lists and those the store holds, skipping names under
// outputs that could not be read (already reported).
func compareSubjects(got, want []*intoto.ResourceDescriptor, skip func(string) bool) []Problem {
	var problems []Problem
	gotBy := map[string]map[string]string{}
	for _, g := range got {
		if _, dup := gotBy[g.GetName()]; dup {
			problems = append(problems, Problem{What: "subject " + g.GetName(), Err: fmt.Errorf("%w: listed twice", ErrSubjectExtra)})
			continue
		}
		gotBy[g.GetName()] = g.GetDigest()
	}
	wantBy := map[string]map[string]string{}
	for _, w := range want {
		wantBy[w.GetName()] = w.GetDigest()
	}
	names := slices.Sorted(maps.Keys(gotBy))
	for _, n := range slices.Sorted(maps.Keys(wantBy)) {
		if _, ok := gotBy[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		if skip(n) {
			continue
		}
		g, inGot := gotBy[n]
		w, inWant := wantBy[n]
		switch {
		case !inWant:
			problems = append(problems, Problem{What: "subject " + n, Err: fmt.Errorf("%w: the attestation lists %s, the record's outputs hold no such file", ErrSubjectExtra, spellDigests(g))})
		case !inGot:
			problems = append(problems, Problem{What: "subject " + n, Err: fmt.Errorf("%w: the store holds %s", ErrSubjectAbsent, spellDigests(w))})
		case !maps.Equal(g, w):
			problems = append(problems, Problem{What: "subject " + n, Err: fmt.Errorf("%w: the attestation says %s, the store holds %s", ErrSubjectDiffer, spellDigests(g), spellDigests(w))})
		}
	}
	return problems
}

func spellDigests(d map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		parts = append(parts, k+":"+d[k])
	}
	return strings.Join(parts, " ")
}
