package api

import (
	"context"
	"time"

	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/quota"
	"github.com/dabom/dpcs/service/api/view"
)

// The family dashboard (GET /families/{familyId}): the pool and every
// member's usage, limits and standing, from SQL (who) and the quota state
// (how much, whether allowed).

// Pool is a family pool's state this month.
type Pool struct {
	PlanBytes      int64   `json:"planBytes"`
	TopUpBytes     int64   `json:"topUpBytes"`
	TotalBytes     int64   `json:"totalBytes"`
	UsedBytes      int64   `json:"usedBytes"`
	RemainingBytes int64   `json:"remainingBytes"`
	UsedPercent    float64 `json:"usedPercent"`
	// ReservedBytes is what the network's live charging sessions hold of
	// the pool: granted to them, not yet reported used (not usage: alert
	// levels and UsedBytes count only what was used).
	ReservedBytes int64 `json:"reservedBytes" doc:"What live network charging sessions hold of the pool: granted, not yet reported used (not usage)"`
	Thresholds    []int `json:"thresholds" doc:"Alert levels, percent of the pool remaining"`
	Fired         []int `json:"fired" doc:"Thresholds already announced this month"`
}

// Standing is whether a member may use data now (view.Standing).
type Standing = view.Standing

func standing(s quota.MemberStatus) Standing {
	st := Standing{Status: "ALLOWED", Decision: string(s.Decision), Rule: s.Rule, ThrottleKbps: s.ThrottleKbps}
	if s.Blocked() {
		st.Status = "BLOCKED"
	}
	return st
}

// DashboardMember is one member's line of the dashboard.
type DashboardMember struct {
	CustomerID       int64   `json:"customerId"`
	Name             string  `json:"name"`
	Role             string  `json:"role"`
	DailyUsedBytes   int64   `json:"dailyUsedBytes"`
	MonthlyUsedBytes int64   `json:"monthlyUsedBytes"`
	SharePercent     float64 `json:"sharePercent" doc:"Share of the family's use this month"`
	PolicyVersion    int64   `json:"policyVersion"`
	ReservedBytes    int64   `json:"reservedBytes" doc:"What the member's live network charging sessions hold this month: granted, not yet reported used"`
	Minor            bool    `json:"minor,omitempty" doc:"Under 19: under the operator's gift rules it only receives gifts"`
	// DailyLimitBytes is the member's daily limit in effect now, approved
	// extras included; MonthlyLimitBytes what it has for the month (the
	// month's extras and gifts included, today's extra not: it lifts the
	// monthly limit for today only, TodayExtraBytes). Absent when not set.
	DailyLimitBytes   *int64 `json:"dailyLimitBytes,omitempty" doc:"The member's daily limit now, approved extras included; absent: no daily limit"`
	MonthlyLimitBytes *int64 `json:"monthlyLimitBytes,omitempty" doc:"The member's monthly limit with the month's approved extras and gifts (today's extra is TodayExtraBytes); absent: no monthly limit"`
	TodayExtraBytes   *int64 `json:"todayExtraBytes,omitempty" doc:"More data approved for today only; absent: none"`
	// TodayLeftBytes is what the member may still use today: the smallest of
	// what its daily and monthly limits leave and what the family pool has.
	TodayLeftBytes int64 `json:"todayLeftBytes" doc:"What the member may still use today: the smallest of what its daily limit, its monthly limit (today's extra included) and the family pool leave"`
	// NextDowntime is when the member's next time window begins.
	NextDowntime *NextDowntime `json:"nextDowntime,omitempty" doc:"When the member's next time window begins (within 8 days); absent: none"`
	Standing
}

// NextDowntime is a time window's next start.
type NextDowntime struct {
	Rule  string    `json:"rule" doc:"The window's key: BLOCK:TIME:START (the night window) or BLOCK:TIME:<name>" example:"BLOCK:TIME:밤"`
	Start time.Time `json:"start"`
	// Local is Start in the service zone, as windows are set.
	Local string `json:"local" doc:"Start as the local time YYYYMMDDHHMM of the service zone (the zone windows are set in)" example:"202611262200"`
}

// Dashboard is the family view: the pool and every member's share and standing.
type Dashboard struct {
	FamilyID    int64             `json:"familyId"`
	Name        string            `json:"name"`
	Month       string            `json:"month" example:"202602"`
	Provisioned bool              `json:"provisioned" doc:"false: no pool was provisioned, every request is blocked"`
	Pool        Pool              `json:"pool"`
	Members     []DashboardMember `json:"members"`
}

type dashboardOutput struct{ Body Dashboard }

func (a *Server) dashboard(ctx context.Context, fid int64) (Dashboard, error) {
	f, err := a.cfg.Store.GetFamily(ctx, fid)
	if err != nil {
		return Dashboard{}, err
	}
	members, err := a.cfg.Store.ListMembers(ctx, fid, false)
	if err != nil {
		return Dashboard{}, err
	}
	st, err := a.cfg.State.Family(ctx, fid)
	if err != nil {
		return Dashboard{}, err
	}
	d := Dashboard{FamilyID: f.ID, Name: f.Name, Month: st.Month, Provisioned: st.Provisioned,
		Pool: Pool{PlanBytes: st.Plan, TopUpBytes: st.TopUps, TotalBytes: st.Total, UsedBytes: st.Used,
			RemainingBytes: st.Remaining, UsedPercent: st.UsedPercent(), ReservedBytes: st.Reserved, Thresholds: nonNil(st.Thresholds), Fired: nonNil(st.Fired)},
		Members: []DashboardMember{}}
	status := make(map[int64]quota.MemberStatus, len(st.Members))
	for _, ms := range st.Members {
		status[ms.CustomerID] = ms
	}
	at := a.cfg.Clock()
	now := policy.MomentOf(at, a.cfg.State.Location())
	line := func(cid int64, name, role string, ms quota.MemberStatus) DashboardMember {
		dm := DashboardMember{CustomerID: cid, Name: name, Role: role, DailyUsedBytes: ms.DailyUsed,
			MonthlyUsedBytes: ms.MonthlyUsed, ReservedBytes: ms.MonthlyReserved, PolicyVersion: ms.Version, Standing: standing(ms), TodayLeftBytes: max(st.Remaining, 0)}
		if c, err := policy.ParseConstraints(ms.Constraints); err == nil && len(ms.Constraints) > 0 {
			daily, monthly := c.EffectiveLimits(now)
			dm.DailyLimitBytes, dm.MonthlyLimitBytes = daily, c.MonthlyAllowance(now)
			if x := c.Extras[now.Day]; x > 0 && (daily != nil || monthly != nil) {
				dm.TodayExtraBytes = &x
			}
			if daily != nil {
				dm.TodayLeftBytes = min(dm.TodayLeftBytes, max(*daily-ms.DailyUsed, 0))
			}
			if monthly != nil {
				dm.TodayLeftBytes = min(dm.TodayLeftBytes, max(*monthly-ms.MonthlyUsed, 0))
			}
			if next, ok := policy.NextDowntime(c, at, a.cfg.State.Location()); ok {
				dm.NextDowntime = &NextDowntime{Rule: next.Rule, Start: next.Start, Local: next.Start.Format("200601021504")}
			}
		}
		if st.Used > 0 {
			dm.SharePercent = float64(ms.MonthlyUsed) * 100 / float64(st.Used)
		}
		return dm
	}
	for _, m := range members {
		ms, ok := status[m.ID]
		if !ok { // in SQL but not provisioned in Redis: judged as not a member
			ms = quota.MemberStatus{CustomerID: m.ID, Decision: policy.BlockedNotMember}
		}
		delete(status, m.ID)
		dm := line(m.ID, m.Name, string(m.Role), ms)
		dm.Minor = m.Minor
		d.Members = append(d.Members, dm)
	}
	for _, ms := range st.Members { // provisioned in Redis only (e.g. simulated population)
		if _, ok := status[ms.CustomerID]; ok {
			d.Members = append(d.Members, line(ms.CustomerID, "", string(policy.RoleMember), ms))
		}
	}
	return d, nil
}
