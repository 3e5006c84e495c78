package envelope

// The rules payload fields are checked by (the payloads' validate
// methods).

func positive(field string, v int64) error {
	if v <= 0 {
		return invalid(field, "must be > 0")
	}
	return nil
}

func nonNegative(field string, v int64) error {
	if v < 0 {
		return invalid(field, "must be ≥ 0")
	}
	return nil
}

func atLeast(field string, v, min int64) error {
	if v < min {
		return invalid(field, "must be ≥ %d", min)
	}
	return nil
}

// MaxCategoryLen bounds an app category's name (GrantStep.Category).
const MaxCategoryLen = 32

// categoryName reports whether c is empty or an app category's name
// (VIDEO, GAME, …: upper-case letters, digits and _).
func categoryName(c string) bool {
	if len(c) > MaxCategoryLen {
		return false
	}
	for _, r := range c {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

func nonEmpty(field, v string) error {
	if v == "" {
		return required(field)
	}
	return nil
}
