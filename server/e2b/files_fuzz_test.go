package e2b

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// FuzzWriteFiles feeds POST /files's multipart reader any body: it never
// panics, and what it answers written is a file in the workspace, under
// /home/user, that the Manager has.
func FuzzWriteFiles(f *testing.F) {
	part := func(name, filename, body string) string {
		return "--B\r\nContent-Disposition: form-data; name=\"" + name + "\"; filename=\"" + filename + "\"\r\n\r\n" + body + "\r\n"
	}
	f.Add(part("file", "/home/user/a.txt", "A") + "--B--\r\n")
	f.Add(part("file", "d/b.txt", "B") + part("file", "/home/user/../x", "X") + "--B--\r\n")
	f.Add(part("other", "c", "C") + part("file", "~/e", "") + "--B--\r\n")
	f.Add("--B\r\nContent-Disposition: form-data; name=file; filename*=UTF-8''%2Fetc%2Fpasswd\r\n\r\nP\r\n--B--\r\n")
	f.Add("--B\r\n\r\n--B")
	m := managertest.New(f, sandboxes.Options{})
	s := New(m, Options{})
	info, err := m.Create(context.Background(), sandboxes.Spec{})
	if err != nil {
		f.Fatal(err)
	}
	b := &box{id: info.ID, procs: map[uint32]*proc{}}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/files", strings.NewReader(body))
		r.Header.Set("Content-Type", "multipart/form-data; boundary=B")
		w := httptest.NewRecorder()
		if err := s.writeFiles(w, r, b, ""); err != nil {
			return
		}
		var out []writtenFile
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != http.StatusOK {
			t.Fatalf("answered %d %q: %v", w.Code, w.Body, err)
		}
		for _, f := range out {
			rel, ok := strings.CutPrefix(f.Path, Home+"/")
			if !ok {
				t.Fatalf("wrote %q, outside %s", f.Path, Home)
			}
			fi, err := m.Stat(context.Background(), b.id, rel)
			if err != nil || fi.Type != "file" {
				t.Fatalf("wrote %q, which the Manager has not: %+v %v", f.Path, fi, err)
			}
		}
	})
}
