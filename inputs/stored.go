package inputs

import (
	"fmt"
	"os"

	"github.com/agentsandbox/agentsandbox/record"
)

// PlaceStored places an input that a record kept, from the blob store
// alone, at dst, the way Fetch places a fetched one: a file is copied (an
// archive, by source's name, unpacked), a tree restored from its NAR. The
// blob is re-hashed as it is read, and the source is never read. It is
// how a rerun gets the very inputs of the run it repeats; a blob that is
// gone is an error wrapping record.ErrBlobMissing.
func (f *Fetcher) PlaceStored(in record.Input, source, dst string) error {
	if f.Store == nil {
		return fmt.Errorf("place stored input %q: no store", in.Name)
	}
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("place stored input %q: destination %s already exists; inputs go into a fresh workspace", in.Name, dst)
	}
	switch in.Format {
	case record.FormatFile, record.FormatNAR:
	default:
		return fmt.Errorf("place stored input %q: unknown format %q; want file or nar", in.Name, in.Format)
	}
	if err := f.place(Fetched{Input: in}, source, dst); err != nil {
		return fmt.Errorf("place stored input %q at %s: %w", in.Name, dst, err)
	}
	return nil
}
