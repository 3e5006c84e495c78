package view

import (
	"time"

	"github.com/dabom/dpcs/service/store"
)

// BearerScheme is the OpenAPI security scheme of a member's access token.
const BearerScheme = "bearer"

// Secured is the Security of every operation needing an access token.
func Secured() []map[string][]string { return []map[string][]string{{BearerScheme: {}}} }

// PolicyView is a member's policy and standing.
type PolicyView struct {
	FamilyID   int64             `json:"familyId"`
	CustomerID int64             `json:"customerId"`
	Version    int64             `json:"version" doc:"Monotonic per member; send it as expectedVersion to avoid overwriting another owner's change"`
	Rules      map[string]string `json:"rules" doc:"Constraint keys (doc/architecture.md, the policy package), e.g. LIMIT:DATA:MONTHLY, BLOCK:ACCESS, BLOCK:APP:<appId>, BLOCK:TIME:START"`
	TemplateID int64             `json:"templateId,omitempty"`
	UpdatedBy  int64             `json:"updatedBy,omitempty"`
	UpdatedAt  *time.Time        `json:"updatedAt,omitempty"`
	// Standing is the member's standing under this policy (nil when the
	// quota engine could not be asked).
	Standing *Standing `json:"standing,omitempty"`
	// EventID is the POLICY_UPDATED event of a change.
	EventID string `json:"eventId,omitempty"`
	// Extras are the extra allowances in effect now (granted data requests).
	Extras []ExtraView `json:"extras,omitempty" doc:"Extra allowances in effect now (LIMIT:DATA:EXTRA:<YYYYMMDD|YYYYMM>, from approved data requests): each raises the daily and monthly limits while its day or month lasts. A replace keeps them unless it names them"`
	// Exceptions are the exceptions in effect now ("30분 더").
	Exceptions []ExceptionView `json:"exceptions,omitempty" doc:"Exceptions in effect now (EXCEPT:TIME, EXCEPT:APP:<appId>, granted by an owner or an approved TIME or APP request): downtime, or an app's block, lifted until a time. A replace keeps them unless it names them"`
}

// Standing is whether a member may use data now, and why not.
type Standing struct {
	Status       string `json:"status" enum:"ALLOWED,BLOCKED"`
	Decision     string `json:"decision" doc:"ALLOWED or the block reason, e.g. BLOCKED_LIMIT_MONTHLY" example:"BLOCKED_LIMIT_MONTHLY"`
	Rule         string `json:"rule,omitempty" doc:"The constraint that blocks"`
	ThrottleKbps int64  `json:"throttleKbps,omitempty"`
}

// ExtraView is an extra allowance in effect now (LIMIT:DATA:EXTRA:<period>).
type ExtraView struct {
	Key    string `json:"key" example:"LIMIT:DATA:EXTRA:20261123"`
	Scope  string `json:"scope" enum:"DAY,MONTH"`
	Period string `json:"period" doc:"YYYYMMDD (DAY) or YYYYMM (MONTH)" example:"20261123"`
	Bytes  int64  `json:"bytes"`
}

// ExceptionView is an exception in effect now: downtime (TIME) or an app's
// block (APP) lifted until a time.
type ExceptionView struct {
	Key   string    `json:"key" example:"EXCEPT:TIME"`
	Kind  string    `json:"kind" enum:"TIME,APP"`
	AppID string    `json:"appId,omitempty" doc:"APP: the app"`
	Until string    `json:"until" doc:"The local time YYYYMMDDHHMM (the service zone) it ends at" example:"202611262241"`
	Ends  time.Time `json:"ends" doc:"The same end as an instant"`
}

// AppUsageView is one app's share.
type AppUsageView struct {
	AppID        string `json:"appId"`
	AllowedBytes int64  `json:"allowedBytes"`
	Events       int64  `json:"events"`
}

// HourUsageView is one hour's share.
type HourUsageView struct {
	Hour         time.Time `json:"hour"`
	AllowedBytes int64     `json:"allowedBytes"`
	Events       int64     `json:"events"`
}

// UsageShares are a usage report's shares by app and by hour.
func UsageShares(r store.UsageReport) ([]AppUsageView, []HourUsageView) {
	apps := make([]AppUsageView, 0, len(r.ByApp))
	for _, u := range r.ByApp {
		apps = append(apps, AppUsageView{AppID: u.AppID, AllowedBytes: u.AllowedBytes, Events: u.Events})
	}
	hours := make([]HourUsageView, 0, len(r.ByHour))
	for _, u := range r.ByHour {
		hours = append(hours, HourUsageView{Hour: u.Hour, AllowedBytes: u.AllowedBytes, Events: u.Events})
	}
	return apps, hours
}
