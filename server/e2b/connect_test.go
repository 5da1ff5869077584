package e2b

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	var b []byte
	b = appendEnvelope(b, 0, []byte(`{"a":1}`))
	b = appendEnvelope(b, flagEndStream, []byte(`{}`))
	b = appendEnvelope(b, 0, nil)
	if want := "\x00\x00\x00\x00\x07{\"a\":1}\x02\x00\x00\x00\x02{}\x00\x00\x00\x00\x00"; string(b) != want {
		t.Fatalf("envelopes %q, want %q", b, want)
	}
	r := bytes.NewReader(b)
	for _, want := range []struct {
		flags   byte
		payload string
	}{{0, `{"a":1}`}, {flagEndStream, `{}`}, {0, ``}} {
		flags, payload, err := readEnvelope(r, 100)
		if err != nil || flags != want.flags || string(payload) != want.payload {
			t.Fatalf("readEnvelope = %#x %q %v, want %#x %q", flags, payload, err, want.flags, want.payload)
		}
	}
	if _, _, err := readEnvelope(r, 100); err != io.EOF {
		t.Fatalf("after the last envelope: %v, want io.EOF", err)
	}
}

func TestEnvelopeRefusals(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
	}{
		{"short head", "\x00\x00\x00", "5-byte head"},
		{"short payload", "\x00\x00\x00\x00\x05abc", "read a Connect envelope's 5 bytes"},
		{"too large", "\x00\x00\x00\x10\x00", "the most this server takes is 100"},
		{"compressed", "\x01\x00\x00\x00\x01x", "compressed"},
		{"unknown flags", "\x80\x00\x00\x00\x01x", "unknown flags"},
	} {
		_, _, err := readEnvelope(strings.NewReader(c.in), 100)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: readEnvelope(%q) = %v, want an error with %q", c.name, c.in, err, c.want)
		}
	}
}

// FuzzReadEnvelope: the reader never panics or reads past its bound, and
// what it reads is exactly the envelope at the start of its input.
func FuzzReadEnvelope(f *testing.F) {
	f.Add(appendEnvelope(nil, 0, []byte(`{"process":{"cmd":"/bin/bash"}}`)))
	f.Add(appendEnvelope(nil, flagEndStream, []byte(`{}`)))
	f.Add([]byte("\x00\xff\xff\xff\xff"))
	f.Add([]byte("\x01\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 64
		flags, payload, err := readEnvelope(bytes.NewReader(in), max)
		if err != nil {
			return
		}
		if len(payload) > max {
			t.Fatalf("a payload of %d bytes over the bound %d", len(payload), max)
		}
		if again := appendEnvelope(nil, flags, payload); !bytes.HasPrefix(in, again) {
			t.Fatalf("read %#x %q from %q, which does not start with its envelope %q", flags, payload, in, again)
		}
	})
}

func TestMessagesJSON(t *testing.T) {
	var req startRequest
	if err := decodeMessage([]byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"},"cwd":"src"},"stdin":false,"future":1}`), &req); err != nil {
		t.Fatal(err)
	}
	if req.Process.Cmd != "/bin/bash" || len(req.Process.Args) != 3 || req.Process.Envs["A"] != "1" || *req.Process.Cwd != "src" || *req.Stdin {
		t.Fatalf("decoded %+v", req)
	}
	for in, want := range map[string]signal{`{"signal":"SIGNAL_SIGKILL"}`: 9, `{"signal":15}`: 15} {
		var s sendSignalRequest
		if err := decodeMessage([]byte(in), &s); err != nil || s.Signal != want {
			t.Errorf("%s: signal %d, %v; want %d", in, s.Signal, err, want)
		}
	}
	var s sendSignalRequest
	if err := decodeMessage([]byte(`{"signal":"SIGNAL_SIGSTOP"}`), &s); err == nil {
		t.Errorf("an unknown signal name was taken")
	}
	b, _ := json.Marshal(startResponse{Event: processEvent{Data: &dataEvent{Stdout: []byte("hi\n")}}})
	if string(b) != `{"event":{"data":{"stdout":"aGkK"}}}` {
		t.Errorf("a data event is %s", b)
	}
	b, _ = json.Marshal(startResponse{Event: processEvent{End: &endEvent{ExitCode: 3, Exited: true, Status: "exit status 3"}}})
	if string(b) != `{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3"}}}` {
		t.Errorf("an end event is %s", b)
	}
	b, _ = json.Marshal(entryInfo{Name: "a", Type: fileTypeFile, Path: "/home/user/a", Size: 5, Mode: 0o644, Permissions: "-rw-r--r--"})
	if !strings.Contains(string(b), `"size":"5"`) {
		t.Errorf("int64 size is not a string: %s", b)
	}
}

func TestWorkspacePath(t *testing.T) {
	for in, want := range map[string]string{
		"/home/user": "", "/home/user/": "", "~": "", "~/a": "a", "a/b": "a/b", "/home/user/a/../b": "b",
		"/workspace/x": "x", "/workspace": "", "./a": "a", "~root/x": "~root/x",
	} {
		if got, err := workspacePath(in); err != nil || got != want {
			t.Errorf("workspacePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"/etc/passwd", "../x", "/home/user/../x", "/home/userx", "a/../../x", "/", "a\x00b", "/workspace/../etc"} {
		if got, err := workspacePath(in); err == nil {
			t.Errorf("workspacePath(%q) = %q, want a refusal", in, got)
		}
	}
}
