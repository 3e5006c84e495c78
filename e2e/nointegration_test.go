//go:build !integration

package e2e

// realBackends are the real-server backends of the integration build.
func realBackends() []backend { return nil }
