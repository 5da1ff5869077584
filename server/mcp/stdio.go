package mcp

import (
	"context"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// StdioTransport is the SDK's newline-delimited JSON transport over in and
// out, changed in one way: when in ends, the connection stays open until
// every request read before the end has been answered. A client that
// writes its requests and closes stdin at once (printf ... | agentsandbox
// mcp) gets every answer; the SDK's own transport drops the answers still
// being made when its read hits EOF. Closing the connection (a signal, the
// server stopping) ends the wait.
func StdioTransport(in io.Reader, out io.Writer) sdk.Transport {
	return &answeringTransport{inner: &sdk.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}}}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type answeringTransport struct{ inner sdk.Transport }

func (t *answeringTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &answeringConn{Connection: c, open: map[jsonrpc.ID]bool{}, closed: make(chan struct{})}, nil
}

// answeringConn counts the calls it has read and not yet answered.
type answeringConn struct {
	sdk.Connection

	mu        sync.Mutex
	open      map[jsonrpc.ID]bool
	answered  chan struct{} // closed (and replaced) whenever a call is answered
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *answeringConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		c.waitAnswered(ctx)
		return nil, err
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		c.mu.Lock()
		c.open[req.ID] = true
		c.mu.Unlock()
	}
	return msg, nil
}

func (c *answeringConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		if c.open[resp.ID] {
			delete(c.open, resp.ID)
			if c.answered != nil {
				close(c.answered)
				c.answered = nil
			}
		}
		c.mu.Unlock()
	}
	return err
}

func (c *answeringConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Connection.Close()
}

// waitAnswered returns once no call read is unanswered, or the
// connection is closed, or ctx ends.
func (c *answeringConn) waitAnswered(ctx context.Context) {
	for {
		c.mu.Lock()
		if len(c.open) == 0 {
			c.mu.Unlock()
			return
		}
		if c.answered == nil {
			c.answered = make(chan struct{})
		}
		ch := c.answered
		c.mu.Unlock()
		select {
		case <-ch:
		case <-c.closed:
			return
		case <-ctx.Done():
			return
		}
	}
}
