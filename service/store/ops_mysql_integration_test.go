//go:build integration

package store_test

import "testing"

func TestMariaDBOps(t *testing.T) { runOpsSuite(t, openMySQL) }
