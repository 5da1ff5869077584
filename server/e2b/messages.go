package e2b

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// The envd messages this server reads and writes, as protobuf's JSON
// mapping spells them (lowerCamel names, bytes in base64, int64 as a
// string, enums by name, default values left out): the fields of
// envd's process and filesystem packages, by the names and numbers of
// docs/e2b.md's reference. Only the fields this server acts on are here.

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type startRequest struct {
	Process processConfig    `json:"process"`
	PTY     *json.RawMessage `json:"pty,omitempty"`
	Tag     *string          `json:"tag,omitempty"`
	Stdin   *bool            `json:"stdin,omitempty"`
}

// processEvent is a oneof: exactly one field is set.
type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

// startResponse is StartResponse and ConnectResponse.
type startResponse struct {
	Event processEvent `json:"event"`
}

type startEvent struct {
	Pid uint32 `json:"pid"`
}

type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"` // a command's output on a pty (pty.go)
}

type endEvent struct {
	ExitCode int32   `json:"exitCode,omitempty"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

type processSelector struct {
	Pid *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

type processInfo struct {
	Config processConfig `json:"config"`
	Pid    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

type listResponse struct {
	Processes []processInfo `json:"processes"`
}

type sendSignalRequest struct {
	Process processSelector `json:"process"`
	Signal  signal          `json:"signal"`
}

// signal is process.Signal, by name or number.
type signal int32

var signalNames = map[string]signal{"SIGNAL_UNSPECIFIED": 0, "SIGNAL_SIGKILL": 9, "SIGNAL_SIGTERM": 15}

func (s *signal) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		v, ok := signalNames[name]
		if !ok {
			return fmt.Errorf("signal %q: want SIGNAL_SIGKILL or SIGNAL_SIGTERM", name)
		}
		*s = v
		return nil
	}
	var n int32
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("signal %s: want an enum name or number", b)
	}
	*s = signal(n)
	return nil
}

// name is the signal's name as the Manager takes it.
func (s signal) name() (string, bool) {
	switch s {
	case 9:
		return "SIGKILL", true
	case 15:
		return "SIGTERM", true
	}
	return "", false
}

// File types of filesystem.EntryInfo.
const (
	fileTypeUnspecified = "FILE_TYPE_UNSPECIFIED"
	fileTypeFile        = "FILE_TYPE_FILE"
	fileTypeDirectory   = "FILE_TYPE_DIRECTORY"
	fileTypeSymlink     = "FILE_TYPE_SYMLINK"
)

type entryInfo struct {
	Name          string `json:"name"`
	Type          string `json:"type"`
	Path          string `json:"path"`
	Size          int64s `json:"size"`
	Mode          uint32 `json:"mode"`
	Permissions   string `json:"permissions"`
	Owner         string `json:"owner,omitempty"`
	Group         string `json:"group,omitempty"`
	ModifiedTime  string `json:"modifiedTime,omitempty"`
	SymlinkTarget string `json:"symlinkTarget,omitempty"`
}

// int64s is an int64, which protobuf's JSON writes as a string.
type int64s int64

func (n int64s) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(strconv.FormatInt(int64(n), 10))), nil
}

type pathRequest struct {
	Path string `json:"path"`
}

type listDirRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

type entryResponse struct {
	Entry entryInfo `json:"entry"`
}

type listDirResponse struct {
	Entries []entryInfo `json:"entries"`
}
