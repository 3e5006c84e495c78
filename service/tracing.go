package service

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracingConfig says whether and where a deployable exports OpenTelemetry
// traces. Tracing is off unless an endpoint is configured.
type TracingConfig struct {
	// Endpoint (DPCS_OTLP_ENDPOINT) is the base URL of an OTLP/HTTP
	// collector, e.g. http://otel-collector:4318; spans go to its
	// /v1/traces (as with OTEL_EXPORTER_OTLP_ENDPOINT). https uses TLS.
	Endpoint string `envconfig:"OTLP_ENDPOINT" desc:"OTLP/HTTP collector base URL (http://otel-collector:4318); spans go to its /v1/traces. Empty: tracing off unless the standard OTEL_EXPORTER_OTLP_ENDPOINT is set (doc/observability.md, Tracing)"`
	// OTELEnv is set when DPCS_OTLP_ENDPOINT is empty and the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is:
	// the exporter then follows the standard OTEL_EXPORTER_OTLP_* variables
	// (endpoint, headers, timeout, compression, certificates).
	OTELEnv bool `ignored:"true"`
	// SampleRatio (DPCS_TRACE_SAMPLE_RATIO, 0 to 1, default 1) is the share
	// of new traces recorded; a trace begun upstream (a record carrying a
	// trace context) keeps the decision made where it began.
	SampleRatio float64 `envconfig:"TRACE_SAMPLE_RATIO" default:"1" desc:"share of new traces recorded, 0 to 1; a trace begun upstream keeps its decision"`
	// ServiceName is the resource's service.name; the deployable names
	// itself (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override).
	ServiceName string `ignored:"true"`
	// Exporter, when not nil, receives the spans instead of OTLP (tests use
	// tracetest.NewInMemoryExporter); tracing is then on.
	Exporter sdktrace.SpanExporter `ignored:"true"`
}

// Enabled reports whether spans are exported.
func (c TracingConfig) Enabled() bool { return c.Endpoint != "" || c.OTELEnv || c.Exporter != nil }

// loadTracing reads the tracing variables through getenv.
func loadTracing(getenv func(string) string) (TracingConfig, error) {
	var c TracingConfig
	r, err := readEnv(getenv, &c, nil)
	if err != nil {
		return c, err
	}
	var errs []error
	if c.Endpoint = strings.TrimSpace(c.Endpoint); c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		r.want(&errs, "DPCS_OTLP_ENDPOINT", err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "",
			"an OTLP/HTTP collector URL such as http://otel-collector:4318")
	} else if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		c.OTELEnv = true
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		c.Endpoint, c.OTELEnv = "", false
	}
	r.want(&errs, "DPCS_TRACE_SAMPLE_RATIO", c.SampleRatio >= 0 && c.SampleRatio <= 1, "a share from 0 to 1")
	return c, errors.Join(append(errs, r.errs()...)...)
}

// LoadTracingConfig reads DPCS_OTLP_ENDPOINT, DPCS_TRACE_SAMPLE_RATIO and
// whether the standard OTEL_EXPORTER_OTLP_ENDPOINT is set, through getenv,
// for mains that do not use LoadConfig (the simulator). Errors name the
// variable.
func LoadTracingConfig(getenv func(string) string) (TracingConfig, error) { return loadTracing(getenv) }

// Tracing returns the tracer provider of cfg and its shutdown, which flushes
// the spans not yet exported (call it on exit, after the Kafka clients and
// workers closed). With tracing off it returns a no-op provider, whose
// spans cost next to nothing, and a shutdown that does nothing. It sets no
// global: pass the provider to the workers (WorkersConfig.TracerProvider,
// WithProcessorTracerProvider, notify.WithTracerProvider,
// notify.WithHubTracerProvider) and to the Kafka clients
// (TracingKafkaOpts).
func Tracing(ctx context.Context, cfg TracingConfig) (trace.TracerProvider, func(context.Context) error, error) {
	if !cfg.Enabled() {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp := cfg.Exporter
	if exp == nil {
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			u, err := url.Parse(cfg.Endpoint)
			if err != nil {
				return nil, nil, fmt.Errorf("DPCS_OTLP_ENDPOINT: %w", err)
			}
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		var err error
		if exp, err = otlptracehttp.New(ctx, opts...); err != nil {
			return nil, nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
	}
	name := cfg.ServiceName
	if name == "" {
		name = "dpcs"
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(name)), resource.WithFromEnv(),
		resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && res == nil {
		return nil, nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	)
	return tp, tp.Shutdown, nil
}

// TracerName is the instrumentation scope of the service's spans.
const TracerName = "github.com/dabom/dpcs/service"

// TracePropagator is how trace context travels in Kafka record headers: W3C
// traceparent/tracestate and baggage, so consumers in other languages
// continue the same traces.
func TracePropagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// TracingKafkaOpts are the kgo options that carry trace context through
// Kafka with tp (franz-go's kotel plugin): every produced record gets a
// "<topic> publish" span, a child of the record's Context (or of the
// Produce ctx), injected into its headers (TracePropagator); every fetched
// record gets a "<topic> receive" span continuing the trace in its headers,
// and record.Context carries it to the consumer's own spans. With a nil or
// no-op tp it returns nothing, so a client without tracing pays nothing.
func TracingKafkaOpts(tp trace.TracerProvider) []kgo.Opt {
	if tp == nil {
		return nil
	}
	if _, off := tp.(noop.TracerProvider); off {
		return nil
	}
	t := kotel.NewTracer(kotel.TracerProvider(tp), kotel.TracerPropagator(TracePropagator()))
	return []kgo.Opt{kgo.WithHooks(kotel.NewKotel(kotel.WithTracer(t)).Hooks()...)}
}

// tracingOn reports whether tp records anything (not nil, not no-op).
func tracingOn(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	_, off := tp.(noop.TracerProvider)
	return !off
}
