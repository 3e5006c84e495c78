package testenv

import (
	"context"
	"testing"
	"time"
)

// contextWithTimeout is the test's context (ended when the test ends)
// bounded to d.
func contextWithTimeout(tb testing.TB, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(tb.Context(), d)
}
