// Package s3store is the shared store of records, blobs and refs in an
// S3-compatible bucket: a record.Remote that several state directories (on
// several machines) push to and pull from. It is an edge: the record
// package sees only the record.Remote interface.
//
// A store is named by a URL, s3://BUCKET/PREFIX?endpoint=HOST:PORT with
// optional region=REGION and insecure=1 (plain HTTP), and uses the standard
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and AWS_REGION.
// Writes are single PUTs of a known size (multipart uploads drop the
// conditions below on some servers), unsigned payload with the content's
// sha256 sent as x-amz-checksum-sha256 so the server refuses bytes that do
// not match, and If-None-Match: * so a write never replaces an object (412:
// it is there already). Refs are swapped with If-Match on their ETag.
// docs/store.md has the layout and the guarantees.
package s3store

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/agentsandbox/agentsandbox/record"
)

// Config is a parsed store URL and the credentials it is used with.
type Config struct {
	Bucket   string
	Prefix   string // "" or a path without leading or trailing "/"
	Endpoint string // HOST:PORT
	Region   string
	Insecure bool // plain HTTP
	// AccessKey, SecretKey and SessionToken are the credentials
	// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).
	AccessKey, SecretKey, SessionToken string
}

// defaultEndpoint is the endpoint of a URL without endpoint=.
const defaultEndpoint = "s3.amazonaws.com"

// ParseURL parses s3://BUCKET[/PREFIX][?endpoint=HOST:PORT&region=R&insecure=1]
// and takes the credentials and default region from getenv.
func ParseURL(raw string, getenv func(string) string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("store URL %q: %w", raw, err)
	}
	if u.Scheme != "s3" {
		return Config{}, fmt.Errorf("store URL %q: want s3://BUCKET/PREFIX?endpoint=HOST:PORT", raw)
	}
	if u.Host == "" || u.User != nil || u.Fragment != "" {
		return Config{}, fmt.Errorf("store URL %q: want s3://BUCKET/PREFIX?endpoint=HOST:PORT (no user or fragment)", raw)
	}
	c := Config{
		Bucket: u.Host,
		Prefix: strings.Trim(u.Path, "/"),
		Region: getenv("AWS_REGION"),
	}
	if c.Prefix != "" && path.Clean(c.Prefix) != c.Prefix || strings.Contains(c.Prefix, "..") {
		return Config{}, fmt.Errorf("store URL %q: prefix %q is not a clean path", raw, c.Prefix)
	}
	q := u.Query()
	for k, v := range q {
		if len(v) != 1 {
			return Config{}, fmt.Errorf("store URL %q: %s given %d times", raw, k, len(v))
		}
		switch k {
		case "endpoint":
			c.Endpoint = v[0]
		case "region":
			c.Region = v[0]
		case "insecure":
			switch v[0] {
			case "1", "true":
				c.Insecure = true
			case "0", "false":
			default:
				return Config{}, fmt.Errorf("store URL %q: insecure=%q: want 1 or 0", raw, v[0])
			}
		default:
			return Config{}, fmt.Errorf("store URL %q: unknown parameter %q (known: endpoint, region, insecure)", raw, k)
		}
	}
	if c.Endpoint == "" {
		c.Endpoint = defaultEndpoint
	}
	if _, _, err := net.SplitHostPort(c.Endpoint); err != nil && c.Endpoint != defaultEndpoint {
		return Config{}, fmt.Errorf("store URL %q: endpoint=%q: want HOST:PORT", raw, c.Endpoint)
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	c.AccessKey = getenv("AWS_ACCESS_KEY_ID")
	c.SecretKey = getenv("AWS_SECRET_ACCESS_KEY")
	c.SessionToken = getenv("AWS_SESSION_TOKEN")
	if c.AccessKey == "" || c.SecretKey == "" {
		return Config{}, fmt.Errorf("store %s: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials)", c.URL())
	}
	return c, nil
}

// URL is the store's URL (without credentials).
func (c Config) URL() string {
	u := "s3://" + c.Bucket
	if c.Prefix != "" {
		u += "/" + c.Prefix
	}
	if c.Endpoint != defaultEndpoint {
		u += "?endpoint=" + c.Endpoint
		if c.Insecure {
			u += "&insecure=1"
		}
	}
	return u
}

// Bucket is a record.Remote in an S3 bucket.
type Bucket struct {
	cfg    Config
	client *minio.Client
}

var _ record.Remote = (*Bucket)(nil)

// dialTimeout bounds connecting to the endpoint; maxRetries is how often
// the client retries a failed request (with backoff) before reporting it.
const (
	dialTimeout = 5 * time.Second
	maxRetries  = 3
)

// Open makes a client for the store c. It does not contact the server.
func Open(c Config) (*Bucket, error) {
	tr, err := minio.DefaultTransport(!c.Insecure)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", c.URL(), err)
	}
	tr.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	lookup := minio.BucketLookupPath
	if c.Endpoint == defaultEndpoint {
		lookup = minio.BucketLookupAuto
	}
	cl, err := minio.New(c.Endpoint, &minio.Options{
		Creds:           credentials.NewStaticV4(c.AccessKey, c.SecretKey, c.SessionToken),
		Secure:          !c.Insecure,
		Transport:       tr,
		Region:          c.Region,
		BucketLookup:    lookup,
		TrailingHeaders: true, // lets PutObject send x-amz-checksum-sha256
		MaxRetries:      maxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", c.URL(), err)
	}
	return &Bucket{cfg: c, client: cl}, nil
}

func (b *Bucket) String() string { return b.cfg.URL() }

// Client is the underlying client (tests make buckets with it).
func (b *Bucket) Client() *minio.Client { return b.client }

func (b *Bucket) key(k string) string {
	if b.cfg.Prefix == "" {
		return k
	}
	return b.cfg.Prefix + "/" + k
}

// Check makes one request to the bucket and reports, as Has and Put would,
// what is wrong: an endpoint that does not answer, credentials refused, a
// bucket that does not exist.
func (b *Bucket) Check(ctx context.Context) error {
	ok, err := b.client.BucketExists(ctx, b.cfg.Bucket)
	if err != nil {
		return b.fail("reach", "", err)
	}
	if !ok {
		return fmt.Errorf("store %s: bucket %q does not exist at %s; create it (agentsandbox never creates buckets)", b, b.cfg.Bucket, b.cfg.Endpoint)
	}
	return nil
}

// Has implements record.Remote.
func (b *Bucket) Has(ctx context.Context, key string) (bool, error) {
	_, err := b.client.StatObject(ctx, b.cfg.Bucket, b.key(key), minio.StatObjectOptions{})
	if err == nil {
		return true, nil
	}
	if r := minio.ToErrorResponse(err); r.Code == minio.NoSuchKey || r.StatusCode == http.StatusNotFound && r.Code != minio.NoSuchBucket {
		return false, nil
	}
	return false, b.fail("stat", key, err)
}

func (b *Bucket) putOptions(sum record.Digest) minio.PutObjectOptions {
	return minio.PutObjectOptions{
		ContentType:          "application/octet-stream",
		DisableContentSha256: true,
		DisableMultipart:     true,
		UserMetadata:         map[string]string{"x-amz-checksum-sha256": base64.StdEncoding.EncodeToString(sum[:])},
	}
}

// Put implements record.Remote: one PUT of size bytes, If-None-Match: *.
func (b *Bucket) Put(ctx context.Context, key string, body io.Reader, size int64, sum record.Digest) (bool, error) {
	opts := b.putOptions(sum)
	opts.SetMatchETagExcept("*")
	_, err := b.client.PutObject(ctx, b.cfg.Bucket, b.key(key), body, size, opts)
	if err == nil {
		return true, nil
	}
	if minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed {
		return false, nil
	}
	return false, b.fail("put", key, err)
}

// Get implements record.Remote.
func (b *Bucket) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := b.client.GetObject(ctx, b.cfg.Bucket, b.key(key), minio.GetObjectOptions{})
	if err == nil {
		_, err = obj.Stat() // sends the request
	}
	if err != nil {
		if obj != nil {
			obj.Close()
		}
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, fmt.Errorf("%s: %w %s", key, record.ErrRemoteMissing, b)
		}
		return nil, b.fail("get", key, err)
	}
	return &reader{obj: obj, b: b, key: key}, nil
}

// reader reports a failure mid-read as Get would.
type reader struct {
	obj *minio.Object
	b   *Bucket
	key string
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.obj.Read(p)
	if err != nil && err != io.EOF {
		err = r.b.fail("read", r.key, err)
	}
	return n, err
}

func (r *reader) Close() error { return r.obj.Close() }

// List implements record.Remote.
func (b *Bucket) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	strip := b.key("")
	for o := range b.client.ListObjects(ctx, b.cfg.Bucket, minio.ListObjectsOptions{Prefix: b.key(prefix), Recursive: true}) {
		if o.Err != nil {
			return nil, b.fail("list", prefix, o.Err)
		}
		keys = append(keys, strings.TrimPrefix(o.Key, strip))
	}
	return keys, nil
}

// maxRefBytes bounds a ref's value.
const maxRefBytes = 4096

// GetRef implements record.Remote; a ref's version is its ETag.
func (b *Bucket) GetRef(ctx context.Context, key string) ([]byte, string, error) {
	rc, err := b.Get(ctx, key)
	if errors.Is(err, record.ErrRemoteMissing) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	info, err := rc.(*reader).obj.Stat()
	if err != nil {
		return nil, "", b.fail("get", key, err)
	}
	v, err := io.ReadAll(io.LimitReader(rc, maxRefBytes+1))
	if err != nil {
		return nil, "", err
	}
	if len(v) > maxRefBytes {
		return nil, "", fmt.Errorf("ref %s in %s: larger than %d bytes", key, b, maxRefBytes)
	}
	return v, info.ETag, nil
}

// SwapRef implements record.Remote: a PUT with If-Match on the ETag read
// (If-None-Match: * for a new ref); 412 means another writer changed it.
func (b *Bucket) SwapRef(ctx context.Context, key string, value []byte, old string) (string, error) {
	opts := b.putOptions(record.DigestOf(value))
	if old == "" {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(strings.Trim(old, `"`))
	}
	info, err := b.client.PutObject(ctx, b.cfg.Bucket, b.key(key), bytes.NewReader(value), int64(len(value)), opts)
	if err != nil {
		if minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed {
			return "", fmt.Errorf("swap ref %s in %s: %w", key, b, record.ErrRefChanged)
		}
		return "", b.fail("swap ref", key, err)
	}
	return info.ETag, nil
}

// fail turns a client error into one a person can act on: what to check.
func (b *Bucket) fail(op, key string, err error) error {
	what := op
	if key != "" {
		what += " " + key
	}
	r := minio.ToErrorResponse(err)
	switch {
	case isNetError(err):
		return fmt.Errorf("store %s: %s: cannot reach %s: %w; check the endpoint in the store URL, that the S3 server is running, and that this machine can connect to it", b, what, b.cfg.Endpoint, err)
	case r.Code == "InvalidAccessKeyId" || r.Code == "SignatureDoesNotMatch" || r.Code == "InvalidToken" || r.Code == "ExpiredToken":
		return fmt.Errorf("store %s: %s: the server refused the credentials (%s: %s); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN)", b, what, r.Code, r.Message)
	case r.Code == "AccessDenied" || r.StatusCode == http.StatusForbidden:
		// A HEAD's 403 has no body to tell a wrong key from a missing grant.
		return fmt.Errorf("store %s: %s: access denied (%s); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), and that they may read and write bucket %q", b, what, r.Message, b.cfg.Bucket)
	case r.Code == minio.NoSuchBucket:
		return fmt.Errorf("store %s: %s: bucket %q does not exist at %s; create it (agentsandbox never creates buckets)", b, what, b.cfg.Bucket, b.cfg.Endpoint)
	case r.Code == "BadDigest" || r.Code == "XAmzContentChecksumMismatch" || r.Code == "InvalidDigest" || r.Code == "XAmzContentSHA256Mismatch":
		return fmt.Errorf("store %s: %s: %w: the server computed another sha256 than the one sent (%s); the local copy may be damaged: run agentsandbox records verify", b, what, record.ErrHashMismatch, r.Message)
	}
	return fmt.Errorf("store %s: %s: %w", b, what, err)
}

func isNetError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	var ue *url.Error
	return errors.As(err, &oe) || errors.As(err, &ue) || errors.As(err, &ne)
}
