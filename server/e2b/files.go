package e2b

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
)

// Files in the sandbox's view: E2B's programs name them absolute under
// the home /home/user, or relative to it ("~/" too). The home is the
// workspace (which commands see at /workspace, also accepted), and a path is handed to the Manager as workspace-relative,
// which opens it beneath the workspace (never through a symlink); a
// path outside the home is refused here.

// workspacePath is the workspace-relative path of a sandbox path.
func workspacePath(p string) (string, error) {
	orig := p
	if strings.ContainsRune(p, 0) {
		return "", rpcErrorf(codeInvalidArgument, "path %q contains a NUL byte", orig)
	}
	switch {
	case p == "~":
		p = Home
	case strings.HasPrefix(p, "~/"):
		p = Home + p[1:]
	case !path.IsAbs(p):
		p = Home + "/" + p
	}
	p = path.Clean(p)
	if p == Home || p == sandboxWorkspace {
		return "", nil
	}
	rel, ok := strings.CutPrefix(p, Home+"/")
	if !ok {
		rel, ok = strings.CutPrefix(p, sandboxWorkspace+"/")
	}
	if !ok {
		return "", rpcErrorf(codeInvalidArgument, "path %q is outside %s (or %s, the same directory), the sandbox's workspace: agentsandbox's E2B transport reaches only the workspace (docs/e2b.md)", orig, Home, sandboxWorkspace)
	}
	if err := sandboxes.CheckPathLength(rel); err != nil {
		return "", err
	}
	return rel, nil
}

// sandboxPath is the sandbox's view of a workspace-relative path.
func sandboxPath(rel string) string {
	if rel == "" {
		return Home
	}
	return Home + "/" + rel
}

// entryOf is a Manager file as envd's EntryInfo: absolute path, the
// permission bits as mode and as Go's FileMode string.
func entryOf(fi sandboxes.FileInfo) entryInfo {
	perm, _ := strconv.ParseUint(fi.Mode, 8, 32)
	mode := fs.FileMode(perm) & fs.ModePerm
	e := entryInfo{Name: path.Base(sandboxPath(fi.Path)), Path: sandboxPath(fi.Path), Size: int64s(fi.Size), Mode: uint32(mode),
		Owner: fi.Owner, Group: fi.Group, SymlinkTarget: fi.SymlinkTarget}
	switch fi.Type {
	case "file":
		e.Type = fileTypeFile
	case "dir":
		e.Type, mode = fileTypeDirectory, mode|fs.ModeDir
	case "symlink":
		e.Type, mode = fileTypeSymlink, mode|fs.ModeSymlink
	default:
		e.Type = fileTypeUnspecified
	}
	e.Permissions = mode.String()
	if !fi.ModTime.IsZero() {
		e.ModifiedTime = fi.ModTime.UTC().Format(time.RFC3339Nano)
	}
	return e
}

func (s *Service) stat(ctx context.Context, b *box, r *http.Request) (any, error) {
	var req pathRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	rel, err := workspacePath(req.Path)
	if err != nil {
		return nil, err
	}
	fi, err := s.m.Stat(ctx, b.id, rel)
	if err != nil {
		return nil, err
	}
	return entryResponse{Entry: entryOf(fi)}, nil
}

// maxDepth bounds ListDir's depth, maxEntries its answer.
const (
	maxDepth   = 32
	maxEntries = 10000
)

// listDir is filesystem.Filesystem/ListDir: the entries down to depth
// levels (0 is 1), directories descended into, symlinks not.
func (s *Service) listDir(ctx context.Context, b *box, r *http.Request) (any, error) {
	var req listDirRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	rel, err := workspacePath(req.Path)
	if err != nil {
		return nil, err
	}
	depth := int(req.Depth)
	if depth == 0 {
		depth = 1
	}
	if depth > maxDepth {
		return nil, rpcErrorf(codeInvalidArgument, "depth %d: the most is %d", depth, maxDepth)
	}
	out := listDirResponse{Entries: []entryInfo{}}
	dirs := []string{rel}
	for level := 1; level <= depth && len(dirs) > 0; level++ {
		var next []string
		for _, dir := range dirs {
			list, err := s.m.ListFiles(ctx, b.id, dir)
			if err != nil {
				if level > 1 && sandboxes.CodeOf(err) == sandboxes.CodeNotFound {
					continue // removed meanwhile
				}
				return nil, err
			}
			for _, fi := range list {
				out.Entries = append(out.Entries, entryOf(fi))
				if fi.Type == "dir" {
					next = append(next, fi.Path)
				}
			}
			if len(out.Entries) > maxEntries {
				return nil, rpcErrorf(codeResourceExhausted, "%s holds more than %d entries to depth %d: list less deep", req.Path, maxEntries, depth)
			}
		}
		dirs = next
	}
	return out, nil
}

func (s *Service) remove(ctx context.Context, b *box, r *http.Request) (any, error) {
	var req pathRequest
	if err := readUnary(r, &req); err != nil {
		return nil, err
	}
	rel, err := workspacePath(req.Path)
	if err != nil {
		return nil, err
	}
	if rel == "" {
		return nil, rpcErrorf(codeInvalidArgument, "path %q is the workspace itself: remove what is in it", req.Path)
	}
	if err := s.m.RemoveFile(ctx, b.id, rel, true); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// The HTTP /files route: GET reads a file, POST writes files (multipart,
// one part per file, or one file as the raw body). Its errors are
// {code, message} with code the status.

// filesError answers an error of /files.
func filesError(w http.ResponseWriter, err error) {
	var status int
	var e *rpcError
	if errors.As(err, &e) {
		status = connectStatus(e.Code)
	} else {
		status = server.Status(sandboxes.CodeOf(err))
		if sandboxes.CodeOf(err) == sandboxes.CodeConflict {
			status = http.StatusBadRequest // a directory: the SDK's InvalidArgumentError
		}
		if sandboxes.CodeOf(err) == sandboxes.CodeTooLarge {
			status = http.StatusInsufficientStorage
		}
	}
	writeJSON(w, status, "application/json", apiError{Code: status, Message: err.Error()})
}

func (s *Service) files(w http.ResponseWriter, r *http.Request, id string) {
	b := s.box(id)
	if b == nil {
		filesError(w, rpcErrorf(codeNotFound, "sandbox %q is not running", id))
		return
	}
	q := r.URL.Query()
	var err error
	switch r.Method {
	case http.MethodGet:
		err = s.readFile(w, r, b, q.Get("path"))
	case http.MethodPost:
		err = s.writeFiles(w, r, b, q.Get("path"))
	default:
		w.Header().Set("Allow", "GET, POST")
		err = rpcErrorf(codeUnimplemented, "%s /files: GET reads a file, POST writes", r.Method)
	}
	if err != nil {
		s.logInternal(r, err)
		filesError(w, err)
	}
}

// lazyWriter begins the answer with the file's first byte, so that an
// error before it is still an error status.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyWriter) start() {
	l.started = true
	l.w.Header().Set("Content-Type", "application/octet-stream")
	l.w.WriteHeader(http.StatusOK)
}

func (l *lazyWriter) Write(b []byte) (int, error) {
	if !l.started {
		l.start()
	}
	return l.w.Write(b)
}

func (s *Service) readFile(w http.ResponseWriter, r *http.Request, b *box, p string) error {
	if p == "" {
		return rpcErrorf(codeInvalidArgument, "GET /files: give ?path=, the file to read")
	}
	rel, err := workspacePath(p)
	if err != nil {
		return err
	}
	lw := &lazyWriter{w: w}
	if _, err := s.m.GetFile(r.Context(), b.id, rel, lw); err != nil {
		if lw.started {
			panic(http.ErrAbortHandler) // the client sees a cut answer, not a wrong file
		}
		return err
	}
	if !lw.started {
		w.Header().Set("Content-Length", "0")
		lw.start()
	}
	return nil
}

// writtenFile is an entry of POST /files's answer.
type writtenFile struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// maxParts bounds the files of one upload.
const maxParts = 1000

func (s *Service) writeFiles(w http.ResponseWriter, r *http.Request, b *box, p string) error {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	body := io.Reader(r.Body)
	if enc := r.Header.Get("Content-Encoding"); enc != "" {
		if enc != "gzip" {
			return rpcErrorf(codeInvalidArgument, "Content-Encoding %q: this server takes gzip or none", enc)
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return rpcErrorf(codeInvalidArgument, "the gzip body: %v", err)
		}
		body = zr
	}
	out := []writtenFile{}
	switch mt {
	case "multipart/form-data":
		mr, err := r.MultipartReader()
		if err != nil {
			return rpcErrorf(codeInvalidArgument, "the multipart body: %v", err)
		}
		for n := 0; ; n++ {
			part, err := mr.NextRawPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				return rpcErrorf(codeInvalidArgument, "the multipart body: %v", err)
			}
			if n >= maxParts {
				return rpcErrorf(codeInvalidArgument, "more than %d files in one upload: send fewer at a time", maxParts)
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			target := p
			if target == "" {
				target = partFilename(part)
			}
			f, err := s.putFile(r.Context(), b, target, part)
			part.Close()
			if err != nil {
				return err
			}
			out = append(out, f)
		}
	case "application/octet-stream", "":
		if p == "" {
			return rpcErrorf(codeInvalidArgument, "POST /files with a raw body: give ?path=, the file to write")
		}
		f, err := s.putFile(r.Context(), b, p, body)
		if err != nil {
			return err
		}
		out = append(out, f)
	default:
		return rpcErrorf(codeInvalidArgument, "Content-Type %q: send multipart/form-data (a part \"file\" per file) or application/octet-stream", mt)
	}
	writeJSON(w, http.StatusOK, "application/json", out)
	return nil
}

// partFilename is a part's filename parameter as sent: the SDK puts the
// file's whole path there (which mime/multipart's FileName would cut to
// its last element).
func partFilename(part *multipart.Part) string {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// putFile writes one file of at most sandboxes.MaxFileBytes.
func (s *Service) putFile(ctx context.Context, b *box, p string, r io.Reader) (writtenFile, error) {
	if p == "" {
		return writtenFile{}, rpcErrorf(codeInvalidArgument, "a file part has no path: give ?path= or the path as the part's filename")
	}
	rel, err := workspacePath(p)
	if err != nil {
		return writtenFile{}, err
	}
	if rel == "" {
		return writtenFile{}, rpcErrorf(codeInvalidArgument, "path %q is the workspace itself: name a file in it", p)
	}
	c := &capped{r: r, limit: sandboxes.MaxFileBytes}
	fi, err := s.m.PutFile(ctx, b.id, rel, c, 0)
	if c.over {
		return writtenFile{}, sandboxes.Errorf(sandboxes.CodeTooLarge, "%s is larger than %d bytes, the most one write takes", p, int64(sandboxes.MaxFileBytes))
	}
	if err != nil {
		return writtenFile{}, err
	}
	return writtenFile{Path: sandboxPath(fi.Path), Name: path.Base(sandboxPath(fi.Path)), Type: "file"}, nil
}

// capped fails a body once it passes limit bytes.
type capped struct {
	r     io.Reader
	n     int64
	limit int64
	over  bool
}

func (c *capped) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		c.over = true
		return 0, fmt.Errorf("over %d bytes", c.limit)
	}
	return n, err
}
