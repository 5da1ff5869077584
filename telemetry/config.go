package telemetry

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Protocols the exporter speaks (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolProtobuf = "http/protobuf"
	ProtocolJSON     = "http/json"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME is not set.
const DefaultServiceName = "agentsandbox"

// DefaultEndpoint is where spans go when OTEL_TRACES_EXPORTER=otlp names
// no endpoint: a collector's OTLP/HTTP port on this host.
const DefaultEndpoint = "http://localhost:4318/v1/traces"

// DefaultTimeout bounds one export request unless
// OTEL_EXPORTER_OTLP_TIMEOUT says otherwise (the specification's default).
const DefaultTimeout = 10 * time.Second

// Config is where and how spans are exported.
type Config struct {
	// Endpoint is the full URL spans are posted to (…/v1/traces).
	Endpoint string
	// Protocol is ProtocolProtobuf or ProtocolJSON.
	Protocol string
	// Headers are sent with every export request (authentication).
	Headers map[string]string
	// Gzip compresses request bodies (OTEL_EXPORTER_OTLP_COMPRESSION=gzip).
	Gzip bool
	// Timeout bounds one export request.
	Timeout time.Duration
	// Resource describes what emits the spans: service.name and
	// OTEL_RESOURCE_ATTRIBUTES, sorted by key.
	Resource []Attr
}

// Attr is one resource attribute.
type Attr struct{ Key, Value string }

// FromEnv reads the standard OpenTelemetry environment variables through
// getenv (os.Getenv, or a map in tests). on is false when tracing is off:
// neither OTEL_TRACES_EXPORTER=otlp nor an OTLP endpoint is set, or
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. The error is for a
// setting this exporter cannot honour (grpc, another exporter, a
// malformed endpoint or header list); tracing is then off.
func FromEnv(getenv func(string) string) (cfg Config, on bool, err error) {
	env := func(name string) string { return strings.TrimSpace(getenv(name)) }
	// traces is the signal-specific variable, else the general one.
	traces := func(name string) (string, string) {
		specific := strings.Replace(name, "OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_TRACES_", 1)
		if v := env(specific); v != "" {
			return v, specific
		}
		return env(name), name
	}
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		return Config{}, false, nil
	}
	exporterSet := false
	if v := env("OTEL_TRACES_EXPORTER"); v != "" {
		for _, e := range strings.Split(v, ",") {
			switch strings.TrimSpace(e) {
			case "none":
				return Config{}, false, nil
			case "otlp":
				exporterSet = true
			default:
				return Config{}, false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: only otlp (or none) is supported", v)
			}
		}
	}

	cfg.Endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	endpointVar := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	if cfg.Endpoint == "" {
		if base := env("OTEL_EXPORTER_OTLP_ENDPOINT"); base != "" {
			// The general endpoint is a base: the signal's path is appended.
			cfg.Endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
			endpointVar = "OTEL_EXPORTER_OTLP_ENDPOINT"
		}
	}
	if cfg.Endpoint == "" && !exporterSet {
		return Config{}, false, nil
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = DefaultEndpoint
	}
	u, perr := url.Parse(cfg.Endpoint)
	if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Config{}, false, fmt.Errorf("%s: %q is not an http:// or https:// URL", endpointVar, redact(cfg.Endpoint))
	}

	proto, protoVar := traces("OTEL_EXPORTER_OTLP_PROTOCOL")
	switch proto {
	case "", ProtocolProtobuf:
		cfg.Protocol = ProtocolProtobuf
	case ProtocolJSON:
		cfg.Protocol = ProtocolJSON
	case "grpc":
		return Config{}, false, fmt.Errorf("%s=grpc: only OTLP over HTTP is supported; set it to http/protobuf (or http/json) and point the endpoint at the collector's HTTP port (4318)", protoVar)
	default:
		return Config{}, false, fmt.Errorf("%s=%q: want http/protobuf or http/json", protoVar, proto)
	}

	cfg.Headers = map[string]string{}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		kv, err := parseList(name, env(name))
		if err != nil {
			return Config{}, false, err
		}
		for _, a := range kv {
			cfg.Headers[a.Key] = a.Value
		}
	}

	switch c, v := traces("OTEL_EXPORTER_OTLP_COMPRESSION"); c {
	case "", "none":
	case "gzip":
		cfg.Gzip = true
	default:
		return Config{}, false, fmt.Errorf("%s=%q: want gzip or none", v, c)
	}

	cfg.Timeout = DefaultTimeout
	if t, v := traces("OTEL_EXPORTER_OTLP_TIMEOUT"); t != "" {
		ms, err := strconv.Atoi(t)
		if err != nil || ms <= 0 {
			return Config{}, false, fmt.Errorf("%s=%q: want a number of milliseconds", v, t)
		}
		cfg.Timeout = time.Duration(ms) * time.Millisecond
	}
	if c, v := traces("OTEL_EXPORTER_OTLP_CERTIFICATE"); c != "" {
		return Config{}, false, fmt.Errorf("%s: a custom CA is not supported; use a collector whose certificate the system trusts, or plain http on a trusted network", v)
	}

	res := map[string]string{}
	kv, err := parseList("OTEL_RESOURCE_ATTRIBUTES", env("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return Config{}, false, err
	}
	for _, a := range kv {
		res[a.Key] = a.Value
	}
	if n := env("OTEL_SERVICE_NAME"); n != "" {
		res["service.name"] = n
	} else if res["service.name"] == "" {
		res["service.name"] = DefaultServiceName
	}
	for k, v := range res {
		cfg.Resource = append(cfg.Resource, Attr{k, v})
	}
	sort.Slice(cfg.Resource, func(i, j int) bool { return cfg.Resource[i].Key < cfg.Resource[j].Key })
	return cfg, true, nil
}

// parseList parses the W3C-baggage-like lists of OTEL_EXPORTER_OTLP_HEADERS
// and OTEL_RESOURCE_ATTRIBUTES: key=value pairs separated by commas, the
// values percent-encoded.
func parseList(name, s string) ([]Attr, error) {
	var out []Attr
	if s == "" {
		return nil, nil
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%s: %q is not key=value", name, item)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s: the value of %q: %w", name, k, err)
		}
		out = append(out, Attr{k, dv})
	}
	return out, nil
}

// redact masks the password of a URL that parses, for messages.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}
