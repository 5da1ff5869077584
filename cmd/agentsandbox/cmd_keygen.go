package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/record/provenance"
)

type keygenOptions struct {
	Type string
	Out  string
}

func newKeygenCmd(stdio Stdio) *cobra.Command {
	var opts keygenOptions
	var types []string
	for _, t := range provenance.KeyTypes {
		types = append(types, string(t))
	}
	cmd := &cobra.Command{
		Use:   "keygen --out PREFIX",
		Short: "Make a key pair for signing attestations (records attest)",
		Long: `keygen makes a signing key pair: PREFIX.key, the private key (PKCS#8 PEM,
mode 0600), and PREFIX.pub, the public key (PKIX PEM) that 'records verify
--attestation' and cosign check signatures with. It never overwrites: if
either file exists, it stops. It prints the key id, the hex sha256 of the
public key's DER encoding, which every signature made with the key carries.
The private key is not encrypted: keep it where only its owner can read it.` + exitStatusHelp,
		Example: `  agentsandbox keygen --out ci-signing
  agentsandbox keygen --type ed25519 --out keys/release`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runKeygen(cmd.Context(), stdio, opts, args)
		},
	}
	cmd.Flags().StringVar(&opts.Type, "type", string(provenance.KeyTypes[0]), "key type: "+strings.Join(types, " or "))
	cmd.Flags().StringVar(&opts.Out, "out", "", "write PREFIX.key and PREFIX.pub (required)")
	return cmd
}

func runKeygen(_ context.Context, stdio Stdio, opts keygenOptions, _ []string) error {
	if opts.Out == "" {
		return invalidf("keygen: --out PREFIX is required")
	}
	kt := provenance.KeyType(opts.Type)
	if !slicesContains(provenance.KeyTypes, kt) {
		return invalidf("keygen: --type %q: want ecdsa-p256 or ed25519", opts.Type)
	}
	keyPath, pubPath := opts.Out+".key", opts.Out+".pub"
	for _, p := range []string{keyPath, pubPath} {
		if _, err := os.Lstat(p); err == nil {
			return invalidf("keygen: %s already exists; keygen never overwrites a key: choose another --out, or remove it yourself", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("keygen: %w", err)
		}
	}
	priv, pub, err := provenance.GenerateKey(kt)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	pk, err := provenance.ParsePublicKey(pub)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	id, err := provenance.KeyID(pk)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	if err := writeNew(keyPath, priv, 0o600); err != nil {
		return fmt.Errorf("keygen: write private key: %w", err)
	}
	if err := writeNew(pubPath, pub, 0o644); err != nil {
		os.Remove(keyPath) // no half pairs
		return fmt.Errorf("keygen: write public key: %w", err)
	}
	_, err = fmt.Fprintf(stdio.Out, "private key %s (keep it secret)\npublic key  %s\nkeyid       %s (%s)\n", keyPath, pubPath, id, kt)
	return err
}

// writeNew creates path, which must not exist (not even as a symlink),
// with mode perm whatever the umask, writes data and syncs it.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

func slicesContains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
