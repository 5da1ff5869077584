// Package nartest writes NARs token by token for tests, including the
// malformed ones no NAR writer makes (a name twice, names out of order,
// "", "." and ".." as names), to check that every restore from the record
// store refuses them. Only tests import it.
package nartest

import (
	"bytes"
	"encoding/binary"
)

// Node is one NAR node, as its tokens.
type Node []string

// File is a regular file holding contents.
func File(contents string) Node {
	return Node{"(", "type", "regular", "contents", contents, ")"}
}

// Exec is an executable regular file holding contents.
func Exec(contents string) Node {
	return Node{"(", "type", "regular", "executable", "", "contents", contents, ")"}
}

// Symlink is a symlink to target.
func Symlink(target string) Node { return Node{"(", "type", "symlink", "target", target, ")"} }

// Entry is one named entry of a directory.
type Entry struct {
	Name string
	Node Node
}

// E is an Entry.
func E(name string, n Node) Entry { return Entry{name, n} }

// Dir is a directory of the entries, in the order given (which a well-formed
// NAR sorts, and a test need not).
func Dir(ents ...Entry) Node {
	n := Node{"(", "type", "directory"}
	for _, e := range ents {
		n = append(n, "entry", "(", "name", e.Name, "node")
		n = append(n, e.Node...)
		n = append(n, ")")
	}
	return append(n, ")")
}

// Bytes is the whole NAR with n as its root: each token a little-endian
// 64-bit length and the bytes, zero-padded to a multiple of 8.
func (n Node) Bytes() []byte {
	var b bytes.Buffer
	for _, tok := range append(Node{"nix-archive-1"}, n...) {
		var l [8]byte
		binary.LittleEndian.PutUint64(l[:], uint64(len(tok)))
		b.Write(l[:])
		b.WriteString(tok)
		b.Write(make([]byte, (8-len(tok)%8)%8))
	}
	return b.Bytes()
}
