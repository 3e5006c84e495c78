package view

import (
	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/internal/usertext"
)

// Text is a field of one line that people write and DPCS stores and shows
// to others: a family's or member's name, a template's name. Every route
// declaring one gets it checked by the same rule, internal/usertext: huma
// resolves the field after the schema's checks, storing it in Unicode NFC,
// or answers 422 at the field's location naming the control or invisible
// character it refuses (doc/security.md, "Text people write").
type Text string

// MultilineText is a Text that may also hold line feeds: a data-request
// message, an answer's reason, a template's description.
type MultilineText string

var (
	_ huma.ResolverWithPath  = (*Text)(nil)
	_ huma.ResolverWithPath  = (*MultilineText)(nil)
	_ huma.SchemaTransformer = (*Text)(nil)
	_ huma.SchemaTransformer = (*MultilineText)(nil)
)

// textRule is what the OpenAPI document says of every Text field without a
// doc of its own (fields with one repeat it).
const textRule = "Stored in Unicode NFC; control and invisible characters are refused (422)"

// TransformSchema describes the rule in the OpenAPI document.
func (*Text) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	s.Description = textRule + "; one line."
	return s
}

// TransformSchema describes the rule in the OpenAPI document.
func (*MultilineText) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	s.Description = textRule + "; line feeds (U+000A) are kept."
	return s
}

// Resolve normalises t or refuses it.
func (t *Text) Resolve(_ huma.Context, at *huma.PathBuffer) []error {
	s, err := cleanText(string(*t), usertext.Line, at)
	*t = Text(s)
	return err
}

// Resolve normalises t or refuses it.
func (t *MultilineText) Resolve(_ huma.Context, at *huma.PathBuffer) []error {
	s, err := cleanText(string(*t), usertext.Lines, at)
	*t = MultilineText(s)
	return err
}

// cleanText is s as usertext.Clean returns it, or s and the refusal as an
// error detail at the field's location.
func cleanText(s string, f usertext.Form, at *huma.PathBuffer) (string, []error) {
	clean, err := usertext.Clean(s, f)
	if err != nil {
		return s, []error{&huma.ErrorDetail{Location: at.String(), Message: err.Error()}}
	}
	return clean, nil
}
