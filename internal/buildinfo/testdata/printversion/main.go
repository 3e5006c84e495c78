// Command printversion prints its build information, for buildinfo's test of
// the linker override: its -version line, then the JSON of GET /version.
package main

import (
	"net/http/httptest"
	"os"

	"github.com/dabom/dpcs/internal/buildinfo"
)

func main() {
	if err := buildinfo.Print(os.Stdout, "printversion"); err != nil {
		os.Exit(1)
	}
	rec := httptest.NewRecorder()
	buildinfo.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/version", nil))
	os.Stdout.Write(rec.Body.Bytes())
}
