// Package sdkdeps has no code: its tests hold the module's import rules
// (doc/architecture.md, "Package map") with go list -deps. Each SDK package
// links exactly the third-party modules its entry in sdkdeps_test.go names,
// so that a consumer importing only envelope, policy or quota gets no Kafka
// client, SQL driver or HTTP framework; each service package links only the
// module packages and third-party modules its allow-list in layers_test.go
// names (service/judge: no database/sql, no net/http, not notify); kfake,
// miniredis and the SQL drivers only the composition root, the mains and the
// harnesses; internal/ leaves nothing above them. A new dependency is a
// deliberate change to a list.
package sdkdeps
