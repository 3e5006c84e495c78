// Package gateway is the HTTP API's route for gateways that must ask before
// granting: POST /decisions (doc/architecture.md, "Never trust Redis
// blindly", synchronous decisions). It decodes one usage event or a batch, has a Decider (the
// door's *judge.Decisions) judge them in order and answers each event's
// decision, the pool's remaining bytes and the deciding rule.
//
// Register adds the route to the API's huma.API; the API's authentication
// middleware hands the operations secured by Scheme to Route.Authenticate,
// which accepts only a gateway credential (DPCS_GATEWAY_TOKENS), compared
// in constant time. Errors go through Config.Problem, the API's one error
// mapping. A fast path (fast.go) answers well-formed bodies without huma's
// validation passes, byte for byte as huma would (TestDecideFastMatchesHuma,
// FuzzDecideFast).
package gateway
