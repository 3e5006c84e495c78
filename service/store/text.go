package store

import (
	"errors"

	"github.com/dabom/dpcs/internal/usertext"
)

// cleanText puts *s in the form every text people write is stored in
// (internal/usertext: NFC, no control or invisible characters), or returns
// a FieldError naming field that says which character is refused.
func cleanText(field string, s *string, f usertext.Form) error {
	clean, err := usertext.Clean(*s, f)
	var ue *usertext.Error
	switch {
	case errors.As(err, &ue):
		return &FieldError{Field: field, Msg: ue.Error(), Kind: ErrInvalid}
	case err != nil:
		return invalid(field, "%v", err)
	}
	*s = clean
	return nil
}
