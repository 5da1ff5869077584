package e2b_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSendInput: a Start with stdin: true reads what SendInput sends and
// ends once CloseStdin is called; another sandbox cannot reach its pid,
// and a command started without stdin refuses input.
func TestSendInput(t *testing.T) {
	base := serve(t)
	c := create(t, base, `{"templateID":"base"}`)
	other := create(t, base, `{"templateID":"base"}`)
	unary := func(c created, path, body string) (int, string) {
		code, _, b := do(t, base, call{"POST", path, with(envd(c), "Content-Type", "application/json"), body})
		return code, string(b)
	}
	type result struct {
		events []string
		end    string
	}
	done := make(chan result, 1)
	go func() {
		events, end := stream(t, base, c, `{"process":{"cmd":"cat"},"stdin":true}`, "")
		done <- result{events, end}
	}()
	var code int
	var b string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if code, b = unary(c, "/process.Process/SendInput", `{"process":{"pid":1},"input":{"stdin":"aGkK"}}`); code != http.StatusNotFound {
			break
		}
	}
	if code != http.StatusOK || b != `{}` {
		t.Fatalf("SendInput: %d %s", code, b)
	}
	if code, b := unary(other, "/process.Process/SendInput", `{"process":{"pid":1},"input":{"stdin":"aGkK"}}`); code != http.StatusNotFound || !strings.Contains(b, "not_found") {
		t.Fatalf("SendInput to another sandbox's pid: %d %s", code, b)
	}
	if code, b := unary(c, "/process.Process/SendInput", `{"process":{"pid":1},"input":{"pty":"aGkK"}}`); code == http.StatusOK || !strings.Contains(b, "failed_precondition") || !strings.Contains(b, "has no pty") {
		t.Fatalf("SendInput of pty bytes: %d %s", code, b)
	}
	if code, b := unary(c, "/process.Process/CloseStdin", `{"process":{"pid":1}}`); code != http.StatusOK {
		t.Fatalf("CloseStdin: %d %s", code, b)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("cat did not end once its stdin was closed")
	}
	if r.end != `{}` || len(r.events) < 3 || r.events[1] != `{"event":{"data":{"stdout":"aGkK"}}}` || r.events[len(r.events)-1] != `{"event":{"end":{"exited":true,"status":"exit status 0"}}}` {
		t.Fatalf("cat with stdin: %q, end %s", r.events, r.end)
	}
	if code, b := unary(c, "/process.Process/SendInput", `{"process":{"pid":1},"input":{"stdin":"aGkK"}}`); code != http.StatusNotFound {
		t.Fatalf("SendInput to an ended process: %d %s", code, b)
	}
	// A command started without stdin: true has no stdin to write to.
	slept := make(chan []string, 1)
	go func() {
		events, _ := stream(t, base, c, `{"process":{"cmd":"sleep","args":["2"]}}`, "")
		slept <- events
	}()
	defer func() { <-slept }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if code, b = unary(c, "/process.Process/CloseStdin", `{"process":{"pid":2}}`); code != http.StatusNotFound {
			break
		}
	}
	if code == http.StatusOK || !strings.Contains(b, "failed_precondition") || !strings.Contains(b, "stdinOpen") {
		t.Fatalf("CloseStdin of a command without stdin: %d %s", code, b)
	}
}
