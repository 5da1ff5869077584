package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/s3store"
)

// storeEnv names the shared store when --store is not given.
const storeEnv = "AGENTSANDBOX_STORE"

const storeFlagHelp = "shared store of records and blobs: s3://BUCKET/PREFIX?endpoint=HOST:PORT[&region=R&insecure=1] (credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or file:///DIR; default $" + storeEnv + "; docs/store.md"

// addStoreFlag adds --store to f.
func addStoreFlag(f *pflag.FlagSet, url *string) {
	f.StringVar(url, "store", os.Getenv(storeEnv), storeFlagHelp)
}

// openRemote opens the shared store a --store URL names; nil for "".
func openRemote(url string) (record.Remote, error) {
	switch {
	case url == "":
		return nil, nil
	case strings.HasPrefix(url, "s3://"):
		cfg, err := s3store.ParseURL(url, os.Getenv)
		if err != nil {
			return nil, invalidf("--store: %w", err)
		}
		return s3store.Open(cfg)
	case strings.HasPrefix(url, "file://"):
		dir := strings.TrimPrefix(url, "file://")
		if !strings.HasPrefix(dir, "/") {
			return nil, invalidf("--store %q: a file:// store needs an absolute path (file:///DIR)", url)
		}
		return record.OpenDirRemote(dir)
	}
	return nil, invalidf("--store %q: want s3://BUCKET/PREFIX?endpoint=HOST:PORT or file:///DIR", url)
}

// resolveShared resolves prefix among the records of s and, when none
// matches and a shared store is given, among those of rm, pulling the one
// it names (with every blob it names, each verified) into s: s is rm's
// read-through cache. What was pulled is noted on errOut.
func resolveShared(ctx context.Context, errOut io.Writer, s *record.Store, rm record.Remote, prefix string) (record.ID, error) {
	id, err := s.Resolve(prefix)
	if err == nil || rm == nil || !errors.Is(err, record.ErrNotFound) {
		if err != nil {
			return id, invalid(err)
		}
		return id, nil
	}
	id, err = record.ResolveRemote(ctx, rm, prefix)
	if errors.Is(err, record.ErrNotFound) || errors.Is(err, record.ErrAmbiguous) {
		return id, invalid(err)
	}
	if err != nil {
		return id, err
	}
	if err := pullRecord(ctx, errOut, s, rm, id); err != nil {
		return id, err
	}
	return id, nil
}

func pullRecord(ctx context.Context, errOut io.Writer, s *record.Store, rm record.Remote, id record.ID) error {
	t, err := record.Pull(ctx, s, rm, id)
	if errors.Is(err, record.ErrHashMismatch) {
		return checkFailed(err)
	}
	if err != nil {
		return err
	}
	if !t.Already {
		fmt.Fprintf(errOut, "pulled record %s from %s: %d of its %d blobs (%s) fetched and verified\n", id, rm, t.Sent, t.Blobs, humanBytes(t.Bytes))
	}
	return nil
}

func pushRecord(ctx context.Context, errOut io.Writer, s *record.Store, rm record.Remote, id record.ID) error {
	t, err := record.Push(ctx, s, rm, id)
	if err != nil {
		return err
	}
	if t.Already {
		fmt.Fprintf(errOut, "record %s is in %s already\n", id, rm)
		return nil
	}
	fmt.Fprintf(errOut, "pushed record %s to %s: %d of its %d blobs (%s) sent\n", id, rm, t.Sent, t.Blobs, humanBytes(t.Bytes))
	return nil
}
