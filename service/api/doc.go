// Package api is DPCS's HTTP API (huma v2 on net/http): the family app's
// and the back office's routes, the gateways' synchronous decisions
// (POST /decisions, registered from service/api/gateway), login and tokens, the live notification streams (SSE)
// and the OpenAPI document (/openapi.json, /docs). New validates a Config
// and registers every route; Server.Handler serves them.
//
// A handler decodes, authorizes (doc/security.md, "Who can do what") and
// calls one method: a change to a family goes to Config.Family
// (service/family, which owns the sequence truth → door → relay), a read to
// Config.Store or the door's reads (QuotaReader), a decision to
// Config.Decisions (service/judge). The API holds no door write.
//
// Errors are answered in one place (Server.problem) as RFC 9457 problem
// details naming the field at fault: the store's, the family service's,
// the engine's and the judges' sentinels and typed errors map to 4xx and
// 503 there, never in a handler.
package api
