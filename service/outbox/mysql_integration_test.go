//go:build integration

package outbox_test

import (
	"testing"

	"github.com/dabom/dpcs/internal/testenv"
)

func TestRelayMariaDB(t *testing.T) { runRelay(t, testenv.MySQL) }
