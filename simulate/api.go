package simulate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
)

// RateBody is the simulator's rate as the control API shows it.
type RateBody struct {
	Rate          float64 `json:"rate" minimum:"0" maximum:"10000000" doc:"Target rate in events per second; 0 pauses."`
	EffectiveRate float64 `json:"effectiveRate" readOnly:"true" doc:"Target rate times the hour-of-day factor, when a curve is set."`
	Running       bool    `json:"running" readOnly:"true" doc:"Whether the simulator is started."`
}

type rateOutput struct {
	Body RateBody
}

type setRateInput struct {
	Body struct {
		Rate float64 `json:"rate" minimum:"0" maximum:"10000000" doc:"Target rate in events per second; 0 pauses."`
	}
}

type burstInput struct {
	Body struct {
		Events int64 `json:"events" minimum:"1" maximum:"10000000" doc:"Events to send at once, on top of the rate."`
	}
}

type burstOutput struct {
	Body struct {
		Accepted int64 `json:"accepted" doc:"Events added by this request."`
		Pending  int64 `json:"pending" doc:"Burst events not yet sent, this request's included."`
	}
}

type statsOutput struct {
	Body Stats
}

// RegisterAPI adds the simulator's control operations to api:
//
//	GET  /simulator/rate   the target rate
//	PUT  /simulator/rate   change it at once ({"rate": 5000}; 0 pauses)
//	POST /simulator/burst  send extra events now ({"events": 100000})
//	GET  /simulator/stats  counters and the per-second history
//
// Invalid requests get RFC 9457 problem details naming the field.
func RegisterAPI(api huma.API, sim *Simulator) {
	tags := []string{"Simulator"}
	rateOf := func() *rateOutput {
		st := sim.Stats()
		return &rateOutput{Body: RateBody{Rate: st.Rate, EffectiveRate: st.EffectiveRate, Running: st.Running}}
	}
	huma.Register(api, huma.Operation{
		OperationID: "get-simulator-rate", Method: http.MethodGet, Path: "/simulator/rate",
		Summary: "Get the simulator's rate", Tags: tags,
	}, func(ctx context.Context, _ *struct{}) (*rateOutput, error) {
		return rateOf(), nil
	})
	huma.Register(api, huma.Operation{
		OperationID: "set-simulator-rate", Method: http.MethodPut, Path: "/simulator/rate",
		Summary: "Change the simulator's rate", Tags: tags,
		Description: "Takes effect at once, while the simulator runs. 0 pauses sending.",
	}, func(ctx context.Context, in *setRateInput) (*rateOutput, error) {
		if err := sim.SetRate(in.Body.Rate); err != nil {
			return nil, problem(err, "body.rate", in.Body.Rate)
		}
		return rateOf(), nil
	})
	huma.Register(api, huma.Operation{
		OperationID: "post-simulator-burst", Method: http.MethodPost, Path: "/simulator/burst",
		Summary: "Send a burst of events", Tags: tags, DefaultStatus: http.StatusAccepted,
		Description: "Queues extra events, sent as fast as Kafka accepts them, on top of the rate.",
	}, func(ctx context.Context, in *burstInput) (*burstOutput, error) {
		pending, err := sim.Burst(in.Body.Events)
		if err != nil {
			return nil, problem(err, "body.events", in.Body.Events)
		}
		out := &burstOutput{}
		out.Body.Accepted, out.Body.Pending = in.Body.Events, pending
		return out, nil
	})
	huma.Register(api, huma.Operation{
		OperationID: "get-simulator-stats", Method: http.MethodGet, Path: "/simulator/stats",
		Summary: "Get the simulator's counters and per-second history", Tags: tags,
	}, func(ctx context.Context, _ *struct{}) (*statsOutput, error) {
		return &statsOutput{Body: sim.Stats()}, nil
	})
}

// problem maps a simulator error to problem details (the schema checks
// catch almost everything before it gets here). The value sent is never
// repeated (value is accepted for the callers' symmetry and dropped).
func problem(err error, field string, _ any) error {
	if errors.Is(err, ErrInvalid) {
		return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: field, Message: err.Error()})
	}
	return huma.Error500InternalServerError("simulator error")
}

// NewHandler returns an http.Handler serving the control API of sim with its
// OpenAPI 3.1 description at /openapi.json (and /openapi.yaml) and
// interactive docs at /docs. Its problems never repeat what was sent: no
// error detail carries the value, and a body that is not JSON is said to be
// so without encoding/json's text (which quotes it).
func NewHandler(sim *Simulator) http.Handler {
	mux := http.NewServeMux()
	cfg := huma.DefaultConfig("DPCS simulator control API", "1.0.0")
	format := huma.DefaultJSONFormat
	format.Unmarshal = func(data []byte, v any) error {
		if err := json.Unmarshal(data, v); err != nil {
			return errors.New("the body is not a JSON object of the operation's fields")
		}
		return nil
	}
	cfg.Formats = map[string]huma.Format{"application/json": format, "json": format}
	cfg.Transformers = append(cfg.Transformers, func(_ huma.Context, _ string, v any) (any, error) {
		if m, ok := v.(*huma.ErrorModel); ok {
			c := *m
			c.Errors = make([]*huma.ErrorDetail, 0, len(m.Errors))
			for _, d := range m.Errors {
				if d != nil {
					c.Errors = append(c.Errors, &huma.ErrorDetail{Location: d.Location, Message: d.Message})
				}
			}
			return &c, nil
		}
		return v, nil
	})
	api := humago.New(mux, cfg)
	RegisterAPI(api, sim)
	return mux
}
