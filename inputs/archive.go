package inputs

import (
	"archive/tar"
	"archive/zip"
	"compress/bzip2"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"

	getter "github.com/hashicorp/go-getter/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Archive kinds, as go-getter names them (the source's suffix, or its
// ?archive= parameter; ?archive=false turns unpacking off).
var (
	tarKinds    = []string{"tar", "tar.gz", "tgz", "tar.bz2", "tbz2", "tar.xz", "txz", "tar.zst", "tzst"}
	singleKinds = []string{"gz", "bz2", "xz", "zst"}
)

func knownKind(k string) bool {
	return k == "zip" || slices.Contains(tarKinds, k) || slices.Contains(singleKinds, k)
}

// archiveKind says how source is to be unpacked, "" for not at all.
func archiveKind(source string) string {
	for _, p := range []string{"file::", "http::"} {
		source = strings.TrimPrefix(source, p)
	}
	path := source
	if u, err := url.Parse(source); err == nil {
		path = u.Path
		if v := u.Query().Get("archive"); v != "" {
			switch v {
			case "false", "0", "-":
				return ""
			}
			if knownKind(v) {
				return v
			}
		}
	}
	best := ""
	for _, k := range append(append([]string{"zip"}, tarKinds...), singleKinds...) {
		if strings.HasSuffix(path, "."+k) && len(k) > len(best) {
			best = k
		}
	}
	return best
}

// decompressed opens the decompressed stream of a tar-family archive.
func decompressed(kind string, r io.Reader) (io.Reader, func(), error) {
	switch kind {
	case "tar":
		return r, func() {}, nil
	case "tar.gz", "tgz", "gz":
		z, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return z, func() { z.Close() }, nil
	case "tar.bz2", "tbz2", "bz2":
		return bzip2.NewReader(r), func() {}, nil
	case "tar.xz", "txz", "xz":
		z, err := xz.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return z, func() {}, nil
	case "tar.zst", "tzst", "zst":
		z, err := zstd.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return z, z.Close, nil
	}
	return nil, nil, fmt.Errorf("unknown archive kind %q", kind)
}

// unpack unpacks archive src of kind at dst within lim.
func unpack(kind, src, dst string, lim Limits) error {
	switch {
	case slices.Contains(singleKinds, kind):
		return unpackSingle(kind, src, dst, lim)
	case kind == "zip":
		if err := scanZip(src, lim); err != nil {
			return err
		}
	default:
		if err := scanTar(kind, src, lim); err != nil {
			return err
		}
	}
	// The scan above enforced the exact limits; go-getter's untar counts
	// its final end-of-archive read as an entry, so it gets one more.
	d := getter.LimitedDecompressors(lim.MaxFiles+1, lim.MaxBytes)[kind]
	if d == nil {
		return fmt.Errorf("unknown archive kind %q", kind)
	}
	if err := d.Decompress(dst, src, true, 0o022); err != nil {
		return fmt.Errorf("unpack %s archive: %w", kind, err)
	}
	return nil
}

var errLinks = errors.New("archives with links are refused: go-getter unpacks symlinks and hard links as empty files; repack without links, or use a directory or git input")

// scanTar checks a tar archive before go-getter unpacks it: no links or
// special files, and within the limits.
func scanTar(kind, src string, lim Limits) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	r, done, err := decompressed(kind, f)
	if err != nil {
		return fmt.Errorf("open %s archive: %w", kind, err)
	}
	defer done()
	tr := tar.NewReader(r)
	var files int
	var size int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s archive: %w", kind, err)
		}
		switch h.Typeflag {
		case tar.TypeSymlink, tar.TypeLink:
			return fmt.Errorf("archive entry %q links to %q: %w", h.Name, h.Linkname, errLinks)
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return fmt.Errorf("archive entry %q is a device or fifo; archives may hold only files and directories", h.Name)
		}
		files++
		size += h.Size
		if err := lim.check(files, size); err != nil {
			return err
		}
	}
}

func scanZip(src string, lim Limits) error {
	z, err := zip.OpenReader(src)
	if err != nil {
		return fmt.Errorf("open zip archive: %w", err)
	}
	defer z.Close()
	var size int64
	for i, f := range z.File {
		if f.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("archive entry %q is a symlink: %w", f.Name, errLinks)
		}
		size += int64(f.UncompressedSize64)
		if err := lim.check(i+1, size); err != nil {
			return err
		}
	}
	return nil
}

func (l Limits) check(files int, size int64) error {
	if files > l.MaxFiles {
		return fmt.Errorf("archive has more than %d entries (the file-count limit)", l.MaxFiles)
	}
	if size > l.MaxBytes {
		return fmt.Errorf("archive unpacks to more than %d bytes (the size limit)", l.MaxBytes)
	}
	return nil
}

// unpackSingle decompresses a single compressed file. go-getter's own
// single-file decompressors silently truncate at their size limit; this one
// fails instead.
func unpackSingle(kind, src, dst string, lim Limits) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	r, done, err := decompressed(kind, f)
	if err != nil {
		return fmt.Errorf("open %s file: %w", kind, err)
	}
	defer done()
	w, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	n, err := io.Copy(w, io.LimitReader(r, lim.MaxBytes+1))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("decompress %s file: %w", kind, err)
	}
	if n > lim.MaxBytes {
		return fmt.Errorf("%s file decompresses to more than %d bytes (the size limit)", kind, lim.MaxBytes)
	}
	return nil
}
