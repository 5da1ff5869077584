package vm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// qmp sends one QMP command (after the capabilities handshake) to the
// socket at path and waits for its answer, skipping asynchronous events.
func qmp(path, command string, timeout time.Duration) error {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	r := bufio.NewReader(c)
	type reply struct {
		QMP    json.RawMessage `json:"QMP"`
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
		Event string `json:"event"`
	}
	read := func() (reply, error) {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return reply{}, err
			}
			var m reply
			if err := json.Unmarshal(line, &m); err != nil {
				return reply{}, fmt.Errorf("decode %q: %w", line, err)
			}
			if m.Event == "" {
				return m, nil
			}
		}
	}
	if _, err := read(); err != nil { // the greeting
		return fmt.Errorf("qmp %s: greeting: %w", command, err)
	}
	for _, cmd := range []string{"qmp_capabilities", command} {
		if _, err := fmt.Fprintf(c, "{\"execute\":%q}\n", cmd); err != nil {
			return fmt.Errorf("qmp %s: %w", cmd, err)
		}
		m, err := read()
		if err != nil {
			if cmd == "quit" {
				return nil // qemu may close before answering
			}
			return fmt.Errorf("qmp %s: %w", cmd, err)
		}
		if m.Error != nil {
			return fmt.Errorf("qmp %s: %s: %s", cmd, m.Error.Class, m.Error.Desc)
		}
	}
	return nil
}
