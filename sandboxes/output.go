package sandboxes

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/agentsandbox/agentsandbox/record"
)

// An exec's output, one stream of it (outStream) at a time, is kept in two
// places, each bounded:
//
//   - on disk, as it comes: its first Options.LogLimit bytes are written to
//     a blob of the record store (record.BlobWriter), which the record names
//     once the command has ended. Readers that fall behind, or come later,
//     read from there.
//   - in memory, while the command runs: its newest OutputWindow bytes (a
//     ring that grows as needed), for readers at the live edge and for the
//     bytes past the disk limit.
//
// A foreground exec's reader is pinned: the command is held (its output is
// not read from the agent, so its writes block) rather than drop a byte
// that reader has not had and that is not on disk. Any other reader that
// asks for bytes that are neither on disk nor in memory gets a gap event
// naming them. Once the command has ended, its blobs are stored and no
// pinned reader needs the ring, the memory is released.

// OutputWindow is how much of each stream of a running exec the server
// holds in memory (a power of two).
const OutputWindow = 1 << 20

// ring holds the newest bytes of a stream, at most OutputWindow, at their
// offset modulo the buffer's length. The buffer grows by doubling up to
// OutputWindow, so
// appending costs amortised O(1) per byte and a quiet command holds
// little.
type ring struct {
	buf        []byte
	start, end int64 // the offsets held: [start, end)
}

// startAfter is where the ring would start after n more bytes.
func (r *ring) startAfter(n int) int64 {
	return max(r.start, r.end+int64(n)-OutputWindow)
}

func (r *ring) write(p []byte) {
	if len(p) == 0 {
		return
	}
	if len(p) > OutputWindow {
		r.end += int64(len(p) - OutputWindow)
		r.start = r.end
		p = p[len(p)-OutputWindow:]
	}
	if need := r.end + int64(len(p)) - r.start; need > int64(len(r.buf)) && len(r.buf) < OutputWindow {
		c := max(len(r.buf), 4<<10)
		for int64(c) < need && c < OutputWindow {
			c *= 2
		}
		nb := make([]byte, c)
		for off := r.start; off < r.end; {
			n := r.read(nb[off&int64(c-1):], off)
			off += int64(n)
		}
		r.buf = nb
	}
	r.start = r.startAfter(len(p))
	mask := int64(len(r.buf) - 1)
	for len(p) > 0 {
		n := copy(r.buf[r.end&mask:], p)
		p = p[n:]
		r.end += int64(n)
	}
}

// read copies bytes from offset off (in [start, end]) into p, as many as
// fit and are held, and returns how many.
func (r *ring) read(p []byte, off int64) int {
	mask := int64(len(r.buf) - 1)
	n := 0
	for n < len(p) && off < r.end {
		want := min(len(p)-n, int(r.end-off))
		k := copy(p[n:n+want], r.buf[off&mask:])
		n += k
		off += int64(k)
	}
	return n
}

// free lets go of the buffer; nothing is held from then on.
func (r *ring) free() {
	r.buf = nil
	r.start = r.end
}

// outStream is one output stream of an exec. The exec's mu guards every
// field but the disk ones (spool, path, blob), which its diskMu guards.
type outStream struct {
	name  string // stdout, stderr
	ring  ring
	limit int64 // the most bytes kept on disk
	kept  int64 // bytes [0, kept) are on disk
	// spool is the blob being written, nil before the first byte and
	// after the end; path is the stored blob once it is committed.
	spool   *record.BlobWriter
	path    string
	blob    *record.Digest
	diskErr error // why the disk copy stopped short of the limit
}

func (s *outStream) total() int64 { return s.ring.end }

// toDisk writes the part of p that stream i's disk copy still takes and
// returns how many bytes are on disk now. Only the pump calls it, without
// holding x.mu: the bytes below kept are not written to, so readers read
// them beside it.
func (x *execState) toDisk(i int, kept int64, p []byte) (int64, error) {
	s := &x.streams[i]
	room := s.limit - kept
	if room <= 0 || len(p) == 0 {
		return kept, nil
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	if s.spool == nil {
		w, err := x.store.NewBlobWriter()
		if err != nil {
			return kept, err
		}
		x.diskMu.Lock()
		s.spool = w
		x.diskMu.Unlock()
	}
	n, err := s.spool.Write(p)
	return kept + int64(n), err
}

// store ends the disk copy: the blob is committed (an empty one for a
// stream without bytes) and named by its digest. diskMu is held.
func (s *outStream) store(st *record.Store) {
	var d record.Digest
	var err error
	if s.spool == nil {
		d, _, err = st.PutBlob(eofReader{})
	} else {
		d, _, err = s.spool.Commit()
		s.spool = nil
	}
	if err != nil {
		s.diskErr = errors.Join(s.diskErr, err)
		return
	}
	s.blob, s.path = &d, st.BlobPath(d)
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// diskReader reads an exec's disk copies for one reader: from the blob
// being written while the command runs, from the stored blob after.
type diskReader struct {
	x     *execState
	files [2]*os.File
}

func (d *diskReader) readAt(i int, p []byte, off int64) error {
	x := d.x
	x.diskMu.RLock()
	defer x.diskMu.RUnlock()
	s := &x.streams[i]
	var n int
	var err error
	switch {
	case s.spool != nil:
		n, err = s.spool.ReadAt(p, off)
	case s.path != "":
		if d.files[i] == nil {
			if d.files[i], err = os.Open(s.path); err != nil {
				return err
			}
		}
		n, err = d.files[i].ReadAt(p, off)
	default:
		return fmt.Errorf("the %s of exec %s is not on disk", s.name, x.id)
	}
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read the %s of exec %s at offset %d: %w", s.name, x.id, off, err)
}

func (d *diskReader) close() {
	for _, f := range d.files {
		if f != nil {
			f.Close()
		}
	}
}

// storeOutput stores the streams' disk copies as blobs once the command
// has ended.
func (x *execState) storeOutput() {
	x.diskMu.Lock()
	defer x.diskMu.Unlock()
	for i := range x.streams {
		x.streams[i].store(x.store)
	}
}

// release lets go of the memory the streams hold once their blobs are
// stored. The bytes past the disk copy are only in memory: a foreground
// reader still reading has them first.
func (x *execState) release() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range x.streams {
		if s := &x.streams[i]; s.kept < s.total() && s.ring.start < s.total() {
			x.mu.Unlock()
			<-x.unpinned
			x.mu.Lock()
			break
		}
	}
	for i := range x.streams {
		x.streams[i].ring.free()
	}
	x.notify()
}
