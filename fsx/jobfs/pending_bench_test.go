package jobfs

import (
	"os"
	"testing"
)

// BenchmarkPut compares writing a file in place (CreateFile, what a put
// did) with a PendingFile committed into place, for a small and a large
// file, both replacing the file at the path.
func BenchmarkPut(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"4KiB", 4 << 10}, {"1MiB", 1 << 20}} {
		data := make([]byte, size.n)
		for _, how := range []string{"in-place", "pending"} {
			b.Run(size.name+"/"+how, func(b *testing.B) {
				r, err := Open(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				uid, gid := os.Getuid(), os.Getgid()
				b.SetBytes(int64(size.n))
				for b.Loop() {
					if how == "in-place" {
						f, err := r.CreateFile("f", 0o644, uid, gid)
						if err != nil {
							b.Fatal(err)
						}
						f.Write(data)
						f.Close()
						continue
					}
					p, err := r.CreatePending("f", 0o644, uid, gid)
					if err != nil {
						b.Fatal(err)
					}
					p.Write(data)
					if err := p.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
