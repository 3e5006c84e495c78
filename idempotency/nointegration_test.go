//go:build !integration

package idempotency

func realBackends() []backend { return nil }
