package policy

import (
	"errors"
	"fmt"
	"maps"
	"strings"
)

// Role is a member's role in a family, or a back-office role: ADMIN, or
// AGENT (a carrier's care agent, who reads what an ADMIN reads and changes
// nothing).
type Role string

// The roles of doc/security.md, "Who can do what".
const (
	RoleMember Role = "MEMBER"
	RoleOwner  Role = "OWNER"
	RoleAdmin  Role = "ADMIN"
	RoleAgent  Role = "AGENT"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r == RoleMember || r == RoleOwner || r.BackOffice() }

// BackOffice reports whether r is a back-office role (ADMIN or AGENT): one
// of no family, with access to every family.
func (r Role) BackOffice() bool { return r == RoleAdmin || r == RoleAgent }

// Errors Apply returns; callers branch on them with errors.Is.
var (
	ErrTemplateInactive = errors.New("policy: template is inactive")
	ErrRoleNotAllowed   = errors.New("policy: template requires a role the member does not have")
)

// Template is a back-office policy template (doc/store.md, policy_template).
// Applying it copies DefaultRules into a new Assignment; later edits of the
// template never touch assignments made from it.
type Template struct {
	ID          int64
	Name        string
	Type        string
	Description string
	// RequireRole is MEMBER (applies to any member) or OWNER (only to owners).
	RequireRole Role
	// DefaultRules is a constraint map (see ParseConstraints).
	DefaultRules map[string]string
	// Active is false for templates that can no longer be newly applied.
	Active bool
}

// Validate checks the template's fields, naming the first bad one.
func (t Template) Validate() error {
	var errs []error
	if strings.TrimSpace(t.Name) == "" {
		errs = append(errs, fieldErr("name", "required"))
	} else if len(t.Name) > 100 {
		errs = append(errs, fieldErr("name", "at most 100 bytes"))
	}
	if strings.TrimSpace(t.Type) == "" {
		errs = append(errs, fieldErr("type", "required"))
	}
	if t.RequireRole != RoleMember && t.RequireRole != RoleOwner {
		errs = append(errs, fieldErr("requireRole", "must be MEMBER or OWNER, got %q", string(t.RequireRole)))
	}
	if _, err := ParseConstraints(t.DefaultRules); err != nil {
		errs = append(errs, prefixField("defaultRules", err))
	}
	return errors.Join(errs...)
}

// Assignment is a template applied to one member: its own copy of the rules,
// which the owner may customise independently of the template.
type Assignment struct {
	TemplateID int64
	CustomerID int64
	Rules      map[string]string
}

// Apply makes an Assignment of t for a member with the given role. It refuses
// inactive templates (ErrTemplateInactive) and OWNER-only templates for
// non-owners (ErrRoleNotAllowed). The rules are a deep copy of DefaultRules.
func (t Template) Apply(customerID int64, role Role) (Assignment, error) {
	if !t.Active {
		return Assignment{}, fmt.Errorf("%w: %q", ErrTemplateInactive, t.Name)
	}
	if t.RequireRole == RoleOwner && role != RoleOwner {
		return Assignment{}, fmt.Errorf("%w: %q requires OWNER, member is %s", ErrRoleNotAllowed, t.Name, role)
	}
	if customerID <= 0 {
		return Assignment{}, fieldErr("customerId", "must be > 0")
	}
	rules, err := Canonical(t.DefaultRules)
	if err != nil {
		return Assignment{}, prefixField("defaultRules", err)
	}
	return Assignment{TemplateID: t.ID, CustomerID: customerID, Rules: rules}, nil
}

// Merge returns the constraints of several rule maps applied in order: a later
// map's key overrides an earlier one's. The inputs are not modified.
func Merge(rules ...map[string]string) map[string]string {
	out := make(map[string]string)
	for _, r := range rules {
		maps.Copy(out, r)
	}
	return out
}

// prefixField re-roots every FieldError in err under prefix ("defaultRules.BLOCK:ACCESS").
func prefixField(prefix string, err error) error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, inner := range j.Unwrap() {
				walk(inner)
			}
			return
		}
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, &FieldError{Field: prefix + "." + fe.Field, Msg: fe.Msg})
			return
		}
		out = append(out, fmt.Errorf("%s: %w", prefix, e))
	}
	walk(err)
	return errors.Join(out...)
}
