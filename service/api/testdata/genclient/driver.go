// Command driver is the program TestGeneratedClient builds beside a client
// that oapi-codegen generated from the API's served /openapi.json (package
// main, client.go): it uses nothing but that generated client, as a
// consuming team would, and prints what it saw as one JSON object.
//
// The round trip: log in, read the dashboard, read a member's policy, change
// it with its version, then send the same change with the version now stale
// and expect 409 Conflict.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
)

// Result is what the driver prints.
type Result struct {
	Role           string `json:"role"`
	FamilyID       int64  `json:"familyId"`
	Members        int    `json:"members"`
	PoolTotal      int64  `json:"poolTotal"`
	VersionBefore  int64  `json:"versionBefore"`
	VersionAfter   int64  `json:"versionAfter"`
	Limit          string `json:"limit"`
	ConflictStatus int    `json:"conflictStatus"`
	ConflictAt     string `json:"conflictAt"`
}

func main() {
	server := flag.String("server", "", "API base URL")
	login := flag.String("login", "", "member id or phone")
	password := flag.String("password", "", "password")
	family := flag.Int64("family", 0, "family id")
	member := flag.Int64("member", 0, "member whose policy is changed")
	flag.Parse()
	r, err := run(context.Background(), *server, *login, *password, *family, *member)
	if err != nil {
		fmt.Fprintln(os.Stderr, "driver:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "driver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, server, login, password string, family, member int64) (Result, error) {
	var r Result
	c, err := NewClientWithResponses(server)
	if err != nil {
		return r, err
	}
	lr, err := c.LoginWithResponse(ctx, LoginJSONRequestBody{Login: login, Password: password})
	if err != nil {
		return r, err
	}
	if lr.JSON200 == nil {
		return r, fmt.Errorf("login: %d %s", lr.StatusCode(), lr.Body)
	}
	r.Role = string(lr.JSON200.Role)
	bearer := WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+lr.JSON200.AccessToken)
		return nil
	})
	if c, err = NewClientWithResponses(server, bearer); err != nil {
		return r, err
	}

	dr, err := c.GetFamilyWithResponse(ctx, family)
	if err != nil {
		return r, err
	}
	if dr.JSON200 == nil {
		return r, fmt.Errorf("dashboard: %d %s", dr.StatusCode(), dr.Body)
	}
	r.FamilyID, r.PoolTotal = dr.JSON200.FamilyId, dr.JSON200.Pool.TotalBytes
	if dr.JSON200.Members != nil {
		r.Members = len(*dr.JSON200.Members)
	}

	pr, err := c.GetMemberPoliciesWithResponse(ctx, family, member)
	if err != nil {
		return r, err
	}
	if pr.JSON200 == nil {
		return r, fmt.Errorf("policies: %d %s", pr.StatusCode(), pr.Body)
	}
	r.VersionBefore = pr.JSON200.Version

	change := func(limit string, version int64) (*PatchMemberPoliciesResponse, error) {
		set := map[string]string{"LIMIT:DATA:MONTHLY": limit}
		return c.PatchMemberPoliciesWithResponse(ctx, family, member,
			PatchMemberPoliciesJSONRequestBody{Set: &set, ExpectedVersion: &version})
	}
	ok, err := change("524288000", r.VersionBefore)
	if err != nil {
		return r, err
	}
	if ok.JSON200 == nil {
		return r, fmt.Errorf("patch: %d %s", ok.StatusCode(), ok.Body)
	}
	r.VersionAfter, r.Limit = ok.JSON200.Version, ok.JSON200.Rules["LIMIT:DATA:MONTHLY"]

	stale, err := change("1048576", r.VersionBefore)
	if err != nil {
		return r, err
	}
	p := stale.ApplicationproblemJSON409
	if p == nil {
		return r, fmt.Errorf("stale patch: want 409, got %d %s", stale.StatusCode(), stale.Body)
	}
	r.ConflictStatus = stale.StatusCode()
	if p.Errors == nil || len(*p.Errors) == 0 || (*p.Errors)[0].Location == nil {
		return r, errors.New("stale patch: the problem names no location")
	}
	r.ConflictAt = *(*p.Errors)[0].Location
	return r, nil
}
