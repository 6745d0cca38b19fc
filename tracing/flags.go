package tracing

import (
	"fmt"
	"math"

	"github.com/urfave/cli/v2"
)

// Flags are tracing's flags in kvca serve; env names a flag's KVCA_*
// variable.
func Flags(env func(flag string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "otlp-endpoint", Usage: "export OpenTelemetry traces to this OTLP/HTTP `URL` (e.g. http://127.0.0.1:4318/v1/traces); empty: tracing off", EnvVars: env("otlp-endpoint")},
		&cli.Float64Flag{Name: "trace-sample-ratio", Value: 1, Usage: "share of traces recorded when the client's traceparent does not decide", EnvVars: env("trace-sample-ratio")},
	}
}

// ConfigFrom reads tracing's flags.
func ConfigFrom(c *cli.Context) Config {
	return Config{Endpoint: c.String("otlp-endpoint"), SampleRatio: c.Float64("trace-sample-ratio")}
}

// Validate reports the first mistake in one sentence; the endpoint is
// checked by New.
func (c *Config) Validate() error {
	if math.IsNaN(c.SampleRatio) || c.SampleRatio < 0 || c.SampleRatio > 1 {
		return fmt.Errorf("--trace-sample-ratio must be between 0 and 1, got %v", c.SampleRatio)
	}
	return nil
}

// Restart names the settings of next that differ from c: the exporter is
// built at start.
func (c *Config) Restart(next *Config) []string {
	var out []string
	if c.Endpoint != next.Endpoint {
		out = append(out, "otlp-endpoint")
	}
	if c.SampleRatio != next.SampleRatio {
		out = append(out, "trace-sample-ratio")
	}
	return out
}
