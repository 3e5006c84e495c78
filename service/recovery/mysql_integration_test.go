//go:build integration

package recovery_test

import (
	"testing"

	"github.com/dabom/dpcs/internal/testenv"
)

func TestRebuildMariaDB(t *testing.T) { runRebuild(t, testenv.MySQL) }
