package telemetry

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestFromEnv(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		on      bool
		want    Config // compared when on
		wantErr string
	}{
		{name: "nothing set: off", env: nil},
		{name: "unrelated variables: off", env: map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
		{name: "exporter otlp: default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true,
			want: Config{Endpoint: DefaultEndpoint, Protocol: ProtocolProtobuf, Headers: map[string]string{}, Timeout: DefaultTimeout,
				Resource: []Attr{{"service.name", "agentsandbox"}}}},
		{name: "base endpoint gets the signal path", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, on: true,
			want: Config{Endpoint: "http://c:4318/v1/traces", Protocol: ProtocolProtobuf, Headers: map[string]string{}, Timeout: DefaultTimeout,
				Resource: []Attr{{"service.name", "agentsandbox"}}}},
		{name: "traces endpoint as is, everything set", env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://ignored:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c.example:443/custom",
			"OTEL_EXPORTER_OTLP_PROTOCOL":        "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
			"OTEL_EXPORTER_OTLP_HEADERS":         "authorization=Bearer%20abc, x-team=a",
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS":  "x-team=b",
			"OTEL_EXPORTER_OTLP_COMPRESSION":     "gzip",
			"OTEL_EXPORTER_OTLP_TIMEOUT":         "2500",
			"OTEL_SERVICE_NAME":                  "ci",
			"OTEL_RESOURCE_ATTRIBUTES":           "service.name=overridden,deployment.environment=prod,team=a%2Cb",
		}, on: true,
			want: Config{Endpoint: "https://c.example:443/custom", Protocol: ProtocolJSON,
				Headers: map[string]string{"authorization": "Bearer abc", "x-team": "b"}, Gzip: true, Timeout: 2500 * time.Millisecond,
				Resource: []Attr{{"deployment.environment", "prod"}, {"service.name", "ci"}, {"team", "a,b"}}}},
		{name: "service.name from resource attributes", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_RESOURCE_ATTRIBUTES": "service.name=r"}, on: true,
			want: Config{Endpoint: DefaultEndpoint, Protocol: ProtocolProtobuf, Headers: map[string]string{}, Timeout: DefaultTimeout,
				Resource: []Attr{{"service.name", "r"}}}},
		{name: "sdk disabled wins", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "exporter none wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "grpc refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			wantErr: "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: only OTLP over HTTP is supported"},
		{name: "other exporter refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER="zipkin": only otlp`},
		{name: "bad endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "c:4318"}, wantErr: `"c:4318" is not an http:// or https:// URL`},
		{name: "bad header", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, wantErr: `OTEL_EXPORTER_OTLP_HEADERS: "novalue" is not key=value`},
		{name: "bad timeout", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "5s"}, wantErr: "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT=\"5s\": want a number of milliseconds"},
		{name: "custom CA refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/ca.pem"}, wantErr: "a custom CA is not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, on, err := FromEnv(func(k string) string { return c.env[k] })
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || on {
					t.Fatalf("FromEnv: on %v, err %v; want an error with %q", on, err, c.wantErr)
				}
				return
			}
			if err != nil || on != c.on {
				t.Fatalf("FromEnv: on %v, err %v; want on %v", on, err, c.on)
			}
			if on && !reflect.DeepEqual(cfg, c.want) {
				t.Errorf("config\n got %+v\nwant %+v", cfg, c.want)
			}
		})
	}
}
