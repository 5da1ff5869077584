package record

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/nix-community/go-nix/pkg/nar"
)

// narWalk reads a stored NAR one entry at a time.
type narWalk struct {
	h       NarHash
	blob    io.ReadCloser
	src     *abortReader
	pad     *padCheck
	br      *bufio.Reader
	nr      *nar.Reader
	entries int
	buf     []byte // for hashing contents
	// ended is set once Next returned the end or an error: the NAR
	// reader's goroutine has then returned.
	ended bool
}

// abortReader is what the NAR reader reads. It fails every read once
// aborted: the NAR reader parses in a goroutine that only returns once it
// reads the end or an error, so a walk stopped early makes its reads fail
// (see close). It also notes whether the parser ever hit the end of the
// bytes: go-nix reports a NAR cut short between two tokens as a clean end,
// but the parser of a whole NAR stops at its last token without reading on.
type abortReader struct {
	r       io.Reader
	aborted atomic.Bool
	sawEOF  bool
}

var errWalkStopped = errors.New("nar walk stopped")

func (a *abortReader) Read(p []byte) (int, error) {
	if a.aborted.Load() {
		return 0, errWalkStopped
	}
	n, err := a.r.Read(p)
	if errors.Is(err, io.EOF) {
		a.sawEOF = true
	}
	return n, err
}

// padCheck refuses a NAR whose padding is not zero, which go-nix's reader
// skips unread. A NAR is nothing but a sequence of strings, each an 8-byte
// little-endian length, that many bytes and zeros up to a multiple of 8;
// one with other padding bytes unpacks to the same tree as the NAR Nix
// writes, so a stored NAR would restore to a tree that hashes to another
// NAR. padCheck follows that framing over the bytes the reader consumes.
type padCheck struct {
	r      io.Reader
	off    int64   // bytes consumed so far
	lenBuf [8]byte // the length being read
	nLen   int     // bytes of lenBuf filled
	data   uint64  // string bytes still to skip
	pad    int     // padding bytes still to check
	err    error   // the first bad padding byte, returned by every later Read
}

// Read passes on the bytes up to a bad padding byte and then fails, that
// time and every time after: go-nix drops an error of the read that skips
// padding, so the walk sees it at its next read.
func (c *padCheck) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	for i := 0; i < n; i++ {
		switch {
		case c.data > 0:
			skip := uint64(n - i)
			if skip > c.data {
				skip = c.data
			}
			c.data -= skip
			i += int(skip) - 1
		case c.pad > 0:
			if p[i] != 0 {
				c.err = fmt.Errorf("padding byte %#x at offset %d is not zero: not a NAR as Nix writes it", p[i], c.off+int64(i))
				c.off += int64(i)
				return i, c.err
			}
			c.pad--
		default:
			c.lenBuf[c.nLen] = p[i]
			if c.nLen++; c.nLen == 8 {
				c.nLen = 0
				c.data = binary.LittleEndian.Uint64(c.lenBuf[:])
				c.pad = int((8 - c.data%8) % 8)
			}
		}
	}
	c.off += int64(n)
	return n, err
}

func (s *Store) openNARWalk(h NarHash) (*narWalk, error) {
	blob, err := s.OpenBlob(h.Blob())
	if err != nil {
		return nil, err
	}
	return newNARWalk(h, blob)
}

func newNARWalk(h NarHash, blob io.ReadCloser) (*narWalk, error) {
	// The NAR reader reads token by token: buffer it.
	br := bufio.NewReaderSize(blob, 64<<10)
	pad := &padCheck{r: br}
	src := &abortReader{r: pad}
	nr, err := nar.NewReader(src)
	if err != nil {
		blob.Close()
		return nil, fmt.Errorf("read nar %s: %w", h, err)
	}
	return &narWalk{h: h, blob: blob, src: src, pad: pad, br: br, nr: nr}, nil
}

// header returns the next entry's header, or nil at the end of the NAR. A
// regular file's contents are then read from w.nr. It guards against what
// go-nix's reader lets through: a NAR cut short between two tokens (which
// it reports as a clean end) and a NAR of more than MaxOutputEntries
// entries.
func (w *narWalk) header() (*nar.Header, error) {
	hdr, err := w.nr.Next()
	if err != nil {
		w.ended = true
	}
	if errors.Is(err, io.EOF) {
		if w.src.sawEOF {
			return nil, fmt.Errorf("read nar %s: %w", w.h, io.ErrUnexpectedEOF)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read nar %s: %w", w.h, err)
	}
	w.entries++
	if w.entries > MaxOutputEntries {
		return nil, fmt.Errorf("read nar %s: more than %d entries", w.h, MaxOutputEntries)
	}
	return hdr, nil
}

// finish reads the rest of the blob, which checks its hash. Bytes after the
// NAR's end are an error, and so is a last string whose padding was cut
// short or not zero.
func (w *narWalk) finish() error {
	n, err := io.Copy(io.Discard, w.br)
	if err != nil { // a hash mismatch says more than any framing error
		return fmt.Errorf("read nar %s: %w", w.h, err)
	}
	// go-nix reads no further after the last token, and drops an error
	// of the read of its padding: the padding's check is judged here.
	if w.pad.err != nil {
		return fmt.Errorf("read nar %s: %w", w.h, w.pad.err)
	}
	if w.pad.nLen > 0 || w.pad.data > 0 || w.pad.pad > 0 {
		return fmt.Errorf("read nar %s: %w (it ends inside a string or its padding)", w.h, io.ErrUnexpectedEOF)
	}
	if n > 0 {
		return fmt.Errorf("read nar %s: %d bytes after its end", w.h, n)
	}
	return nil
}

// close ends the walk. One stopped before the end makes the NAR reader's
// goroutine read an error and return, instead of leaving it (and its
// buffer) blocked for good: Close alone does not stop it.
func (w *narWalk) close() {
	if !w.ended {
		w.src.aborted.Store(true)
		for {
			if _, err := w.nr.Next(); err != nil {
				break
			}
		}
		w.ended = true
	}
	w.nr.Close()
	w.blob.Close()
}
