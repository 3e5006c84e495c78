// Package doccheck has no code: its test checks that every identifier the
// documentation (README.md and doc/*.md) names in backquotes as pkg.Name,
// pkg.Type.Member or path/pkg.Name, where pkg is one of the module's
// packages, exists in that package — so a rename that leaves a doc behind
// fails `make test`. CHANGELOG.md is history and names what was.
package doccheck
