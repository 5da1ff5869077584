package provenance

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
)

// KeyType is a kind of signing key.
type KeyType string

const (
	// ECDSAP256 signs the SHA-256 of the DSSE PAE with ECDSA on P-256, as
	// an ASN.1 DER signature: what cosign expects of an ECDSA key.
	ECDSAP256 KeyType = "ecdsa-p256"
	// Ed25519 signs the PAE itself (pure ed25519).
	Ed25519 KeyType = "ed25519"
)

// KeyTypes lists the key types GenerateKey makes, the default first.
var KeyTypes = []KeyType{ECDSAP256, Ed25519}

// PEM block types: PKCS#8 private keys and PKIX public keys.
const (
	pemPrivate = "PRIVATE KEY"
	pemPublic  = "PUBLIC KEY"
)

// GenerateKey makes a new key of type t and returns the private key as
// PKCS#8 PEM and the public key as PKIX PEM.
func GenerateKey(t KeyType) (privatePEM, publicPEM []byte, err error) {
	var priv crypto.Signer
	switch t {
	case ECDSAP256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case Ed25519:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		return nil, nil, fmt.Errorf("generate key: unknown type %q: want %s or %s", t, ECDSAP256, Ed25519)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("generate %s key: %w", t, err)
	}
	return encodeKeyPair(priv)
}

func encodeKeyPair(priv crypto.Signer) ([]byte, []byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("encode private key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivate, Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: pemPublic, Bytes: pub}), nil
}

// onePEM decodes the single PEM block of type want in b.
func onePEM(b []byte, want, what string) ([]byte, error) {
	block, rest := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("read %s: no PEM block found (want %q)", what, "-----BEGIN "+want+"-----")
	}
	if block.Type != want {
		return nil, fmt.Errorf("read %s: PEM block is %q, want %q", what, block.Type, want)
	}
	if len(block.Headers) > 0 {
		return nil, fmt.Errorf("read %s: PEM headers (an encrypted key?) are not supported: use a key from agentsandbox keygen", what)
	}
	if p, _ := pem.Decode(rest); p != nil {
		return nil, fmt.Errorf("read %s: more than one PEM block", what)
	}
	return block.Bytes, nil
}

// ParsePrivateKey reads a PKCS#8 PEM private key: ECDSA on P-256 or
// ed25519.
func ParsePrivateKey(b []byte) (crypto.Signer, error) {
	der, err := onePEM(b, pemPrivate, "private key")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("read private key: ECDSA on %s is not supported: want P-256", k.Curve.Params().Name)
		}
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	}
	return nil, fmt.Errorf("read private key: %T keys are not supported: want ECDSA P-256 or ed25519", k)
}

// ParsePublicKey reads a PKIX PEM public key: ECDSA on P-256 or ed25519.
func ParsePublicKey(b []byte) (crypto.PublicKey, error) {
	der, err := onePEM(b, pemPublic, "public key")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("read public key: %w", err)
	}
	switch k := k.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("read public key: ECDSA on %s is not supported: want P-256", k.Curve.Params().Name)
		}
		return k, nil
	case ed25519.PublicKey:
		return k, nil
	}
	return nil, fmt.Errorf("read public key: %T keys are not supported: want ECDSA P-256 or ed25519", k)
}

// KeyID is the hex sha256 of the public key's PKIX DER encoding: the
// keyid of every signature this package makes.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("key id: %w", err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// signer is a dsse.Signer for an ECDSA P-256 or ed25519 key.
type signer struct {
	key crypto.Signer
	id  string
}

func newSigner(key crypto.Signer) (*signer, error) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("sign: ECDSA on %s is not supported: want P-256", k.Curve.Params().Name)
		}
	case ed25519.PrivateKey:
	default:
		return nil, fmt.Errorf("sign: %T keys are not supported: want ECDSA P-256 or ed25519", key)
	}
	id, err := KeyID(key.Public())
	if err != nil {
		return nil, err
	}
	return &signer{key: key, id: id}, nil
}

// Sign signs the PAE: ECDSA over its SHA-256 (ASN.1 DER), ed25519 over
// the bytes themselves.
func (s *signer) Sign(_ context.Context, pae []byte) ([]byte, error) {
	switch k := s.key.(type) {
	case *ecdsa.PrivateKey:
		sum := sha256.Sum256(pae)
		return ecdsa.SignASN1(rand.Reader, k, sum[:])
	case ed25519.PrivateKey:
		return ed25519.Sign(k, pae), nil
	}
	return nil, fmt.Errorf("sign: %T keys are not supported", s.key)
}

func (s *signer) KeyID() (string, error) { return s.id, nil }

// verifier is a dsse.Verifier for an ECDSA P-256 or ed25519 public key.
type verifier struct {
	pub crypto.PublicKey
	id  string
}

func newVerifier(pub crypto.PublicKey) (*verifier, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("verify: ECDSA on %s is not supported: want P-256", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	default:
		return nil, fmt.Errorf("verify: %T keys are not supported: want ECDSA P-256 or ed25519", pub)
	}
	id, err := KeyID(pub)
	if err != nil {
		return nil, err
	}
	return &verifier{pub: pub, id: id}, nil
}

var errBadSignature = errors.New("signature does not verify")

func (v *verifier) Verify(_ context.Context, pae, sig []byte) error {
	ok := false
	switch k := v.pub.(type) {
	case *ecdsa.PublicKey:
		sum := sha256.Sum256(pae)
		ok = ecdsa.VerifyASN1(k, sum[:], sig)
	case ed25519.PublicKey:
		ok = ed25519.Verify(k, pae, sig)
	}
	if !ok {
		return errBadSignature
	}
	return nil
}

func (v *verifier) KeyID() (string, error)   { return v.id, nil }
func (v *verifier) Public() crypto.PublicKey { return v.pub }
