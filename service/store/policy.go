package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/dabom/dpcs/envelope"
	"github.com/dabom/dpcs/internal/sqldialect"
	"github.com/dabom/dpcs/internal/usertext"
	"github.com/dabom/dpcs/policy"
	"github.com/dabom/dpcs/service/outbox"
)

// Policy is a member's current constraints (policy_assignment). A member
// nobody set a policy for has Version 0 and no rules.
type Policy struct {
	FamilyID   int64
	CustomerID int64
	// TemplateID is the template the rules were last copied from, 0 if none.
	TemplateID int64
	// Rules is the canonical constraint map (see policy.ParseConstraints).
	Rules map[string]string
	// Version is monotonic per member: the version quota.Engine.SetConstraints
	// and the policy-updated event carry.
	Version   int64
	UpdatedBy int64
	UpdatedAt time.Time
}

// PolicyChange is a change of one member's constraints. The new map is
// Replace (or, when nil, the current rules) with Set applied and Remove
// deleted.
type PolicyChange struct {
	FamilyID   int64
	CustomerID int64
	Replace    map[string]string
	Set        map[string]string
	Remove     []string
	// ExpectedVersion, when > 0, must be the current version or the change
	// fails with ErrStaleVersion (optimistic concurrency). 0: last write wins.
	ExpectedVersion int64
	By              Actor
}

// PolicyUpdate is the outcome of UpdatePolicy or ApplyTemplate.
type PolicyUpdate struct {
	// Policy is the member's policy after the change; pass its Version and
	// Constraints to the quota state at once (judge.State.Enforce).
	Policy Policy
	// Constraints are Policy.Rules parsed: the store parsed them to
	// validate the change, and hands them on.
	Constraints policy.Constraints
	// Previous are the rules before the change.
	Previous map[string]string
	// EventID is the id of the POLICY_UPDATED event written to the outbox;
	// OutboxID its position in the outbox. Both are zero when Unchanged.
	EventID  string
	OutboxID int64
	// Unchanged is true when the change left the rules (and the template)
	// as they were: nothing was written, and Policy is the current policy at
	// its current version.
	Unchanged bool
}

// GetPolicy returns the policy of the current member cid of family fid.
func (s *Store) GetPolicy(ctx context.Context, fid, cid int64) (Policy, error) {
	if _, err := s.currentMember(ctx, s.db, fid, cid, ""); err != nil {
		return Policy{}, err
	}
	return s.policy(ctx, s.db, fid, cid, "")
}

func (s *Store) policy(ctx context.Context, q querier, fid, cid int64, lock string) (Policy, error) {
	p := Policy{FamilyID: fid, CustomerID: cid, Rules: map[string]string{}}
	var tid sql.NullInt64
	var rules string
	var at sqldialect.NullTime
	err := q.QueryRowContext(ctx, `SELECT template_id, rules, version, updated_by, updated_at FROM policy_assignment WHERE customer_id = ?`+lock, cid).
		Scan(&tid, &rules, &p.Version, &p.UpdatedBy, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return p, nil
	}
	if err != nil {
		return Policy{}, dbErr("get policy", err)
	}
	if err := json.Unmarshal([]byte(rules), &p.Rules); err != nil {
		return Policy{}, fmt.Errorf("store: policy of member %d: rules: %w", cid, err)
	}
	if p.Rules == nil {
		p.Rules = map[string]string{}
	}
	p.TemplateID, p.UpdatedAt = tid.Int64, at.Time
	return p, nil
}

// Policies returns the policies of the family's current members, by member id
// (members without a policy row have Version 0).
func (s *Store) Policies(ctx context.Context, fid int64) ([]Policy, error) {
	return s.policies(ctx, s.db, fid)
}

func (s *Store) policies(ctx context.Context, q querier, fid int64) ([]Policy, error) {
	ms, err := s.listMembers(ctx, q, fid, false)
	if err != nil {
		return nil, err
	}
	out := make([]Policy, 0, len(ms))
	for _, m := range ms {
		p, err := s.policy(ctx, q, fid, m.ID, "")
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// UpdatePolicy changes a member's constraints in one transaction: the
// assignment row with version + 1, an audit row (policy.update, before and
// after) and an outbox row carrying the POLICY_UPDATED envelope for
// policy-updated. A change that leaves the canonical rules as they are
// writes nothing and returns the current policy with Unchanged set (an
// ExpectedVersion is still checked). The new rules are validated (errors wrap ErrInvalid and
// name the key). The caller then calls quota.Engine.SetConstraints (or
// Enforce) with the returned Version and Rules so the next event sees the
// change before the relay publishes it. Concurrent writers serialise on the
// member's row; without ExpectedVersion the last write wins.
func (s *Store) UpdatePolicy(ctx context.Context, c PolicyChange) (PolicyUpdate, error) {
	return s.updatePolicy(ctx, c, "policy.update", 0)
}

func (s *Store) updatePolicy(ctx context.Context, c PolicyChange, action string, templateID int64) (PolicyUpdate, error) {
	var out PolicyUpdate
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		m, err := s.currentMember(ctx, tx, c.FamilyID, c.CustomerID, s.d.ForUpdate())
		if err != nil {
			return err
		}
		if templateID > 0 {
			t, err := s.template(ctx, tx, templateID)
			if err != nil {
				return err
			}
			a, err := t.Apply(m.ID, m.Role)
			switch {
			case errors.Is(err, policy.ErrTemplateInactive):
				return conflict("templateId", "the template is inactive: activate it first", err)
			case errors.Is(err, policy.ErrRoleNotAllowed):
				return conflict("templateId", "the template is for owners only and the member is not an owner", err)
			case err != nil:
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
			c.Replace = a.Rules
		}
		return s.writePolicy(ctx, tx, c, action, templateID, &out)
	})
	return out, err
}

func (s *Store) writePolicy(ctx context.Context, tx *sql.Tx, c PolicyChange, action string, templateID int64, out *PolicyUpdate) error {
	cur, err := s.policy(ctx, tx, c.FamilyID, c.CustomerID, s.d.ForUpdate())
	if err != nil {
		return err
	}
	if c.ExpectedVersion > 0 && c.ExpectedVersion != cur.Version {
		return &FieldError{Field: "expectedVersion", Kind: ErrStaleVersion,
			Msg: fmt.Sprintf("the policy was changed since it was read: it is at version %d, not %d; read it again and retry", cur.Version, c.ExpectedVersion)}
	}
	next := maps.Clone(cur.Rules)
	if c.Replace != nil {
		next = maps.Clone(c.Replace)
		// A new map (an owner's form, a template) keeps what was granted
		// to the member for a while — extra allowances and exceptions —
		// unless it names them (or Remove does): replacing the limits must
		// not silently take back today's "ask for more" or "30분 더".
		for k, v := range cur.Rules {
			if _, named := next[k]; !named && policy.Granted(k) {
				next[k] = v
			}
		}
	}
	maps.Copy(next, c.Set)
	for _, k := range c.Remove {
		delete(next, k)
	}
	now := s.now()
	mo := policy.MomentOf(now, s.loc)
	parsed, err := policy.ParseConstraints(next)
	if err != nil {
		return fmt.Errorf("%w: constraints: %w", ErrInvalid, err)
	}
	// Extras of past days and months are dropped when the policy is written;
	// they alone are no change.
	parsed.DropExpiredExtras(mo)
	canon := parsed.Map()
	if maps.Equal(canon, withoutExpiredExtras(cur.Rules, mo)) && (templateID == 0 || templateID == cur.TemplateID) {
		// Nothing changes: no new version, no audit row, no event (a
		// client retrying a PATCH, or saving an untouched form, would
		// otherwise bump the version and notify the family).
		*out = PolicyUpdate{Policy: cur, Constraints: parsed, Previous: cur.Rules, Unchanged: true}
		return nil
	}
	p := Policy{FamilyID: c.FamilyID, CustomerID: c.CustomerID, TemplateID: cur.TemplateID, Rules: canon,
		Version: cur.Version + 1, UpdatedBy: c.By.ID, UpdatedAt: now.UTC().Truncate(time.Millisecond)}
	if templateID > 0 {
		p.TemplateID = templateID
	}
	rules, err := json.Marshal(canon)
	if err != nil {
		return fmt.Errorf("store: update policy: %w", err)
	}
	var tid any
	if p.TemplateID > 0 {
		tid = p.TemplateID
	}
	if cur.Version == 0 {
		_, err = tx.ExecContext(ctx, `INSERT INTO policy_assignment (customer_id, family_id, template_id, rules, version, updated_by, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, p.CustomerID, p.FamilyID, tid, string(rules), p.Version, p.UpdatedBy, s.t(now))
	} else {
		_, err = tx.ExecContext(ctx, `UPDATE policy_assignment SET family_id = ?, template_id = ?, rules = ?, version = ?, updated_by = ?, updated_at = ?
			WHERE customer_id = ? AND version = ?`, p.FamilyID, tid, string(rules), p.Version, p.UpdatedBy, s.t(now), p.CustomerID, cur.Version)
	}
	if err != nil {
		return dbErr("update policy", err)
	}
	target := memberTarget(c.CustomerID)
	type snapshot struct {
		Version int64             `json:"version"`
		Rules   map[string]string `json:"rules"`
	}
	if err := s.audit(ctx, tx, c.FamilyID, c.By, action, target, snapshot{cur.Version, cur.Rules}, snapshot{p.Version, p.Rules}); err != nil {
		return err
	}
	payload := envelope.PolicyUpdatedPayload{
		FamilyID: c.FamilyID, TargetCustomerID: c.CustomerID, ChangedBy: max(c.By.ID, 0),
		Version: p.Version, Constraints: canon,
	}
	if k, ok := singleChange(cur.Rules, canon); ok {
		payload.PolicyKey = k
		if v, ok := cur.Rules[k]; ok {
			payload.OldValue = &v
		}
		if v, ok := canon[k]; ok {
			payload.NewValue = &v
		}
	}
	env := envelope.New(envelope.NewID(envelope.PrefixPolicy), now, payload)
	id, err := enqueue(ctx, s, tx, envelope.TopicPolicyUpdated, env)
	if err != nil {
		return err
	}
	*out = PolicyUpdate{Policy: p, Constraints: parsed, Previous: cur.Rules, EventID: env.EventID, OutboxID: id}
	return nil
}

// withoutExpiredExtras returns rules without the extra allowances of days and
// months before mo (rules itself when it does not parse).
func withoutExpiredExtras(rules map[string]string, mo policy.Moment) map[string]string {
	c, err := policy.ParseConstraints(rules)
	if err != nil || !c.DropExpiredExtras(mo) {
		return rules
	}
	return c.Map()
}

// singleChange returns the one key whose value differs between a and b.
func singleChange(a, b map[string]string) (string, bool) {
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(policy.Merge(a, b))) {
		va, oka := a[k]
		vb, okb := b[k]
		if oka != okb || va != vb {
			diff = append(diff, k)
		}
	}
	if len(diff) == 1 {
		return diff[0], true
	}
	return "", false
}

// enqueue writes an outbox row for env on topic inside tx.
func enqueue[T envelope.Payload](ctx context.Context, s *Store, q querier, topic string, env envelope.Envelope[T]) (int64, error) {
	id, err := outbox.Enqueue(ctx, q, s.d, s.now(), topic, env)
	switch {
	case errors.Is(err, outbox.ErrInvalid):
		return 0, fmt.Errorf("%w: outbox event: %w", ErrInvalid, err)
	case err != nil:
		return 0, dbErr("outbox", err)
	}
	return id, nil
}

// Template is a policy template row.
type Template struct {
	policy.Template
	CreatedAt time.Time
	UpdatedAt time.Time
}

const templateCols = `id, name, type, description, require_role, default_rules, active, created_at, updated_at`

func scanTemplate(sc scanner) (Template, error) {
	var t Template
	var role, rules string
	var c, u sqldialect.NullTime
	if err := sc.Scan(&t.ID, &t.Name, &t.Type, &t.Description, &role, &rules, &t.Active, &c, &u); err != nil {
		return Template{}, err
	}
	t.RequireRole, t.CreatedAt, t.UpdatedAt = policy.Role(role), c.Time, u.Time
	if err := json.Unmarshal([]byte(rules), &t.DefaultRules); err != nil {
		return Template{}, fmt.Errorf("template %d: default rules: %w", t.ID, err)
	}
	if t.DefaultRules == nil {
		t.DefaultRules = map[string]string{}
	}
	return t, nil
}

func (s *Store) template(ctx context.Context, q querier, id int64) (Template, error) {
	t, err := scanTemplate(q.QueryRowContext(ctx, `SELECT `+templateCols+` FROM policy_template WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Template{}, notFound("template", id)
	}
	if err != nil {
		return Template{}, dbErr("get template", err)
	}
	return t, nil
}

// GetTemplate returns the template id.
func (s *Store) GetTemplate(ctx context.Context, id int64) (Template, error) {
	return s.template(ctx, s.db, id)
}

// ListTemplates returns every template by id; with activeOnly, the active ones.
func (s *Store) ListTemplates(ctx context.Context, activeOnly bool) ([]Template, error) {
	cond := ""
	if activeOnly {
		cond = ` WHERE active = 1`
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+templateCols+` FROM policy_template`+cond+` ORDER BY id`)
	if err != nil {
		return nil, dbErr("list templates", err)
	}
	return collect(rows, "list templates", scanTemplate)
}

// templateArgs validates t, puts its texts in the form they are stored in
// (NFC) and returns its rules as stored.
func templateArgs(t *policy.Template) (string, error) {
	if err := t.Validate(); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for _, f := range []struct {
		field string
		text  *string
		form  usertext.Form
	}{{"name", &t.Name, usertext.Line}, {"type", &t.Type, usertext.Line}, {"description", &t.Description, usertext.Lines}} {
		if err := cleanText(f.field, f.text, f.form); err != nil {
			return "", err
		}
	}
	canon, err := policy.Canonical(t.DefaultRules)
	if err != nil {
		return "", fmt.Errorf("%w: defaultRules: %w", ErrInvalid, err)
	}
	b, err := json.Marshal(canon)
	return string(b), err
}

// CreateTemplate creates a template (its ID is ignored; audited as
// template.create). A taken name is ErrConflict.
func (s *Store) CreateTemplate(ctx context.Context, t policy.Template, by Actor) (Template, error) {
	rules, err := templateArgs(&t)
	if err != nil {
		return Template{}, err
	}
	now := s.t(s.now())
	var out Template
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO policy_template (name, type, description, require_role, default_rules, active, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, t.Name, t.Type, t.Description, string(t.RequireRole), rules, t.Active, now, now)
		if sqldialect.IsDuplicate(err) { // the only unique keys are the id (assigned) and the name
			return conflict("name", "a template with this name exists: choose another name", err)
		}
		if err != nil {
			return dbErr("create template", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return dbErr("create template", err)
		}
		if out, err = s.template(ctx, tx, id); err != nil {
			return err
		}
		return s.audit(ctx, tx, 0, by, "template.create", templateTarget(id), nil, out)
	})
	return out, err
}

func templateTarget(id int64) string { return "template:" + strconv.FormatInt(id, 10) }

// UpdateTemplate replaces template t.ID's fields (audited as
// template.update). Assignments made from it keep their rules.
func (s *Store) UpdateTemplate(ctx context.Context, t policy.Template, by Actor) (Template, error) {
	rules, err := templateArgs(&t)
	if err != nil {
		return Template{}, err
	}
	var out Template
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		before, err := s.template(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE policy_template SET name = ?, type = ?, description = ?, require_role = ?, default_rules = ?, active = ?, updated_at = ?
			WHERE id = ?`, t.Name, t.Type, t.Description, string(t.RequireRole), rules, t.Active, s.t(s.now()), t.ID); sqldialect.IsDuplicate(err) {
			return conflict("name", "a template with this name exists: choose another name", err)
		} else if err != nil {
			return dbErr("update template", err)
		}
		if out, err = s.template(ctx, tx, t.ID); err != nil {
			return err
		}
		return s.audit(ctx, tx, 0, by, "template.update", templateTarget(t.ID), before, out)
	})
	return out, err
}

// DeleteTemplate deletes template id (audited as template.delete).
// Assignments made from it keep their rules and lose the reference.
func (s *Store) DeleteTemplate(ctx context.Context, id int64, by Actor) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		before, err := s.template(ctx, tx, id)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM policy_template WHERE id = ?`, id); err != nil {
			return dbErr("delete template", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE policy_assignment SET template_id = NULL WHERE template_id = ?`, id); err != nil {
			return dbErr("delete template", err)
		}
		return s.audit(ctx, tx, 0, by, "template.delete", templateTarget(id), before, nil)
	})
}

// ApplyTemplate copies template templateID's DefaultRules into the member's
// policy (policy.Template.Apply: inactive templates and OWNER-only templates
// for non-owners are ErrConflict, wrapping policy.ErrTemplateInactive /
// policy.ErrRoleNotAllowed), as UpdatePolicy does (audited as
// policy.apply_template). Later edits of the template change nothing.
func (s *Store) ApplyTemplate(ctx context.Context, fid, cid, templateID, expectedVersion int64, by Actor) (PolicyUpdate, error) {
	if templateID <= 0 {
		return PolicyUpdate{}, invalid("templateId", "must be > 0")
	}
	return s.updatePolicy(ctx, PolicyChange{FamilyID: fid, CustomerID: cid, ExpectedVersion: expectedVersion, By: by},
		"policy.apply_template", templateID)
}
