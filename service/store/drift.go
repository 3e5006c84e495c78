package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/policy"
)

// Kinds of RuleDiff: what re-applying the template would do to the key.
const (
	DiffAdded   = "added"   // the template has the key, the member's policy does not
	DiffRemoved = "removed" // the member's policy has the key, the template does not
	DiffChanged = "changed" // both have it, with different values
)

// RuleDiff is one constraint key on which a member's policy and its template
// differ. Current and Template are the values (nil: the key is absent).
type RuleDiff struct {
	Key      string
	Kind     string
	Current  *string
	Template *string
}

// Drift is a current member whose policy was last copied from a template
// (policy_assignment.template_id) and whose rules differ from the template's
// default rules now: the template was edited since, or the policy was.
type Drift struct {
	Policy Policy
	// Template are the template's rules now (canonical).
	Template map[string]string
	// Diffs are the keys that differ, by key.
	Diffs []RuleDiff
}

// DiffRules lists the keys on which current and template differ, by key:
// what applying the template again changes. Keys granted for a while
// (policy.Granted) that the template does not name are kept by an apply,
// so they are no difference.
func DiffRules(current, template map[string]string) []RuleDiff {
	var out []RuleDiff
	for _, k := range slices.Sorted(maps.Keys(policy.Merge(current, template))) {
		c, okc := current[k]
		t, okt := template[k]
		switch {
		case okc && okt && c == t:
			continue
		case !okc:
			out = append(out, RuleDiff{Key: k, Kind: DiffAdded, Template: &t})
		case !okt && policy.Granted(k):
			// Granted for a while (an approved extra, an exception, data
			// given away): applying the template again keeps it.
			continue
		case !okt:
			out = append(out, RuleDiff{Key: k, Kind: DiffRemoved, Current: &c})
		default:
			out = append(out, RuleDiff{Key: k, Kind: DiffChanged, Current: &c, Template: &t})
		}
	}
	return out
}

// DriftFilter selects the drifted members TemplateDrift returns.
type DriftFilter struct {
	TemplateID int64
	// FamilyID, when > 0, keeps that family's members only.
	FamilyID int64
}

// TemplateDrift returns the drifted members of template f.TemplateID (see
// Drift) by member id, and how many current members' policies come from the
// template in all (drifted or not). An unknown template is ErrNotFound. The
// template's rules are compared as policy.Template.Apply would copy them
// (canonical), whatever its state: an inactive template still shows its
// drift, though re-applying it is refused.
func (s *Store) TemplateDrift(ctx context.Context, f DriftFilter) (drifted []Drift, members int, err error) {
	t, err := s.template(ctx, s.db, f.TemplateID)
	if err != nil {
		return nil, 0, err
	}
	want, err := policy.Canonical(t.DefaultRules)
	if err != nil {
		return nil, 0, fmt.Errorf("store: template %d: default rules: %w", t.ID, err)
	}
	cond, args := ``, []any{f.TemplateID}
	if f.FamilyID > 0 {
		cond, args = ` AND pa.family_id = ?`, append(args, f.FamilyID)
	}
	// Only current members of the family the policy row names: a removed
	// member keeps its row but is nobody's concern.
	rows, err := s.db.QueryContext(ctx, `SELECT pa.customer_id, pa.family_id, pa.rules, pa.version, pa.updated_by, pa.updated_at
		FROM policy_assignment pa JOIN members m ON m.id = pa.customer_id AND m.family_id = pa.family_id AND m.deleted_at IS NULL
		WHERE pa.template_id = ?`+cond+` ORDER BY pa.customer_id`, args...)
	if err != nil {
		return nil, 0, dbErr("template drift", err)
	}
	err = scanRows(rows, "template drift", func(sc scanner) error {
		p := Policy{TemplateID: f.TemplateID}
		var rules string
		var at sqldialect.NullTime
		if err := sc.Scan(&p.CustomerID, &p.FamilyID, &rules, &p.Version, &p.UpdatedBy, &at); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(rules), &p.Rules); err != nil {
			return fmt.Errorf("store: policy of member %d: rules: %w", p.CustomerID, err)
		}
		if p.Rules == nil {
			p.Rules = map[string]string{}
		}
		p.UpdatedAt = at.Time
		members++
		if d := DiffRules(p.Rules, want); len(d) > 0 {
			drifted = append(drifted, Drift{Policy: p, Template: want, Diffs: d})
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return drifted, members, nil
}

// Reapply is one member to re-apply a template to.
type Reapply struct {
	FamilyID, CustomerID int64
	// ExpectedVersion, when > 0, must be the policy's current version
	// (else ErrStaleVersion), as for ApplyTemplate.
	ExpectedVersion int64
}

// ReapplyResult is the outcome of re-applying a template to one member:
// Update when Err is nil, else Err (ErrStaleVersion, ErrConflict,
// ErrNotFound…), this member's alone.
type ReapplyResult struct {
	Reapply
	Update PolicyUpdate
	Err    error
}

// ReapplyTemplate applies template templateID again to each member, each in
// its own transaction exactly as ApplyTemplate does (audited per member as
// policy.apply_template with the rules before and after, an outbox event,
// version checks): one member's failure leaves the others' changes. The
// caller enforces each Update as after ApplyTemplate. A member whose policy
// does not come from the template is ErrConflict (apply the template to it
// instead): re-applying only brings copies back. An unknown template is
// ErrNotFound for the whole call.
func (s *Store) ReapplyTemplate(ctx context.Context, templateID int64, ms []Reapply, by Actor) ([]ReapplyResult, error) {
	if _, err := s.template(ctx, s.db, templateID); err != nil {
		return nil, err
	}
	out := make([]ReapplyResult, 0, len(ms))
	for _, m := range ms {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		up, err := s.reapply(ctx, templateID, m, by)
		out = append(out, ReapplyResult{Reapply: m, Update: up, Err: err})
	}
	return out, nil
}

func (s *Store) reapply(ctx context.Context, templateID int64, m Reapply, by Actor) (PolicyUpdate, error) {
	p, err := s.GetPolicy(ctx, m.FamilyID, m.CustomerID)
	if err != nil {
		return PolicyUpdate{}, err
	}
	if p.TemplateID != templateID {
		return PolicyUpdate{}, conflict("templateId", "the member's policy does not come from this template: apply the template instead", nil)
	}
	return s.ApplyTemplate(ctx, m.FamilyID, m.CustomerID, templateID, m.ExpectedVersion, by)
}
