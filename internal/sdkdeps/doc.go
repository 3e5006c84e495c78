// Package sdkdeps has no code: its test pins the third-party modules each
// SDK package links (go list -deps), so that a consumer importing only
// envelope, policy or quota gets no Kafka client, SQL driver or HTTP
// framework, and a new dependency of any SDK package is a deliberate change
// to the allow-list in sdkdeps_test.go.
package sdkdeps
