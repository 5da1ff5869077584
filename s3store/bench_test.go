package s3store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/remotetest"
	"github.com/agentsandbox/agentsandbox/internal/s3test"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/s3store"
)

// benchOutputs and benchOutputSize make the benchmarked record: 100
// outputs of 64 KiB (104 blobs, 6.4 MiB).
const (
	benchOutputs    = 100
	benchOutputSize = 64 << 10
)

// BenchmarkRecordTransfer pushes and pulls a 100-output record with its
// blobs, beside writing it into the local store: the local store alone
// (local-write: 100 NARs and the record), a shared store in a local
// directory (dir, file://), and versitygw on loopback (s3). Each push goes
// to an empty store, each pull into an empty state directory.
func BenchmarkRecordTransfer(b *testing.B) {
	src := remotetest.OpenStore(b)
	id := remotetest.MakeRecord(b, src, benchOutputs, benchOutputSize)
	var bytes int64
	{
		r, err := src.Get(id)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range r.Steps[0].Outputs {
			bytes += o.NarSize
		}
	}
	b.Run("local-write", func(b *testing.B) {
		b.SetBytes(bytes)
		for b.Loop() {
			b.StopTimer()
			s := remotetest.OpenStore(b)
			b.StartTimer()
			remotetest.MakeRecord(b, s, benchOutputs, benchOutputSize)
		}
	})
	remotes := map[string]func(b *testing.B, i int) record.Remote{
		"dir": func(b *testing.B, i int) record.Remote {
			rm, err := record.OpenDirRemote(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			return rm
		},
	}
	srv := s3test.Start(b) // for the whole benchmark, not one sub-benchmark
	srv.Bucket(b, "bench")
	n := 0
	remotes["s3"] = func(b *testing.B, i int) record.Remote {
		n++
		cfg, err := s3store.ParseURL(srv.URL("bench", fmt.Sprintf("run-%d", n)), s3test.Env)
		if err != nil {
			b.Fatal(err)
		}
		rm, err := s3store.Open(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return rm
	}
	for _, name := range []string{"dir", "s3"} {
		open := remotes[name]
		b.Run("push/"+name, func(b *testing.B) {
			b.SetBytes(bytes)
			i := 0
			for b.Loop() {
				b.StopTimer()
				rm := open(b, i)
				i++
				b.StartTimer()
				if _, err := record.Push(context.Background(), src, rm, id); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("pull/"+name, func(b *testing.B) {
			rm := open(b, -1)
			if _, err := record.Push(context.Background(), src, rm, id); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(bytes)
			for b.Loop() {
				b.StopTimer()
				dst := remotetest.OpenStore(b)
				b.StartTimer()
				if _, err := record.Pull(context.Background(), dst, rm, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
