package api

import (
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/service/api/view"
)

// A member's usage as the family routes show it: by day or month, per
// app and per hour.

type usageInput struct {
	MemberPath
	Period string    `query:"period" enum:"month,day" default:"month" doc:"The current month or day in the service zone; ignored when from and to are given"`
	From   time.Time `query:"from" doc:"Start (inclusive, RFC 3339); with to"`
	To     time.Time `query:"to" doc:"End (exclusive, RFC 3339); with from"`
}

// UsageView is a member's usage report.
type UsageView struct {
	FamilyID         int64           `json:"familyId"`
	CustomerID       int64           `json:"customerId"`
	From             time.Time       `json:"from"`
	To               time.Time       `json:"to"`
	AllowedBytes     int64           `json:"allowedBytes" doc:"Bytes charged to the pool in the period (persisted events)"`
	Events           int64           `json:"events"`
	Blocked          int64           `json:"blocked"`
	ByApp            []AppUsageView  `json:"byApp"`
	ByHour           []HourUsageView `json:"byHour"`
	DailyUsedBytes   int64           `json:"dailyUsedBytes" doc:"Live counter of today (quota engine)"`
	MonthlyUsedBytes int64           `json:"monthlyUsedBytes" doc:"Live counter of this month (quota engine)"`
	Standing         Standing        `json:"standing"`
}

// AppUsageView is one app's share (view.AppUsageView).
type AppUsageView = view.AppUsageView

// HourUsageView is one hour's share (view.HourUsageView).
type HourUsageView = view.HourUsageView

// period resolves a report period: explicit from/to, at most MaxReportRange
// apart, or the current day or month in the service zone.
func (a *Server) period(period string, from, to time.Time) (time.Time, time.Time, error) {
	switch {
	case !from.IsZero() || !to.IsZero():
		if from.IsZero() || to.IsZero() || !from.Before(to) {
			return from, to, huma.Error422UnprocessableEntity("validation failed",
				&huma.ErrorDetail{Location: "query.to", Message: "from and to go together and from must be before to", Value: to})
		}
		if to.Sub(from) > MaxReportRange {
			return from, to, huma.Error422UnprocessableEntity("validation failed",
				&huma.ErrorDetail{Location: "query.to", Message: "to may be at most 366 days after from", Value: to})
		}
		return from, to, nil
	case period == "day":
		now := a.cfg.Clock().In(a.cfg.Store.Location())
		f := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, now.Location())
		return f, f.AddDate(0, 0, 1), nil
	default:
		f, t := a.cfg.Store.MonthRange(a.cfg.Clock())
		return f, t, nil
	}
}
