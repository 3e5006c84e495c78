package service

import (
	"encoding"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// EnvPrefix prefixes every variable of the deployables' configuration.
const EnvPrefix = "DPCS"

// The configuration structs carry envconfig's tags (envconfig, default,
// ignored, desc) and two of their own for doc/configuration.md:
// deployables (which deployables read the variable, when not all that read
// the struct) and doc_default (the default as a person reads it, where the
// loader leaves the field zero and a later layer picks the default).
//
// envconfig.Process reads only the process environment, and the loaders
// take a getenv function (tests pass a map). So the variables are gathered
// by envconfig itself (its public Usaget hands each variable's name, tags
// and field to a template function: the prefixes of nested and embedded
// structs, ignored fields and names are envconfig's own), and each value is
// decoded as envconfig's Process decodes it (Decoder, Setter,
// TextUnmarshaler, BinaryUnmarshaler, then the kind; TestReadEnvLikeEnvconfig
// checks it gives Process's results), from getenv. One difference: getenv
// cannot tell an empty variable from an unset one, so empty means unset
// (the default applies), as the loaders always did.

// envVar is one variable of a configuration struct, as envconfig gathers it.
type envVar struct {
	Key   string
	Field reflect.Value
	Tags  reflect.StructTag
}

// gatherEnv lists the variables of spec (a pointer to a struct), in field
// order, through envconfig.
func gatherEnv(spec any) ([]envVar, error) {
	var vars []envVar
	collect := func(info any) string {
		v := reflect.ValueOf(info)
		vars = append(vars, envVar{Key: v.FieldByName("Key").String(),
			Field: v.FieldByName("Field").Interface().(reflect.Value),
			Tags:  v.FieldByName("Tags").Interface().(reflect.StructTag)})
		return ""
	}
	tmpl, err := template.New("gather").Funcs(template.FuncMap{"collect": collect}).Parse(`{{range .}}{{collect .}}{{end}}`)
	if err != nil {
		return nil, err
	}
	if err := envconfig.Usaget(EnvPrefix, spec, io.Discard, tmpl); err != nil {
		return nil, err
	}
	return vars, nil
}

// envDecoders decode the types that need more than envconfig's rules, keyed
// by the field's type.
type envDecoders map[reflect.Type]func(value string, field reflect.Value) error

// envRead is what readEnv saw: the raw values of the variables that were
// set, and the variables whose value did not decode.
type envRead struct {
	raw map[string]string
	bad map[string]error
	// order keeps the errors in the struct's order.
	order []string
}

// readEnv fills spec from getenv: each variable's value, or its default tag
// when the variable is unset or empty.
func readEnv(getenv func(string) string, spec any, custom envDecoders) (*envRead, error) {
	vars, err := gatherEnv(spec)
	if err != nil {
		return nil, err
	}
	r := &envRead{raw: map[string]string{}, bad: map[string]error{}}
	for _, v := range vars {
		value := getenv(v.Key)
		if value != "" {
			r.raw[v.Key] = value
		} else if value = v.Tags.Get("default"); value == "" {
			continue
		}
		dec := decodeEnv
		if c := custom[v.Field.Type()]; c != nil {
			dec = c
		}
		if err := dec(value, v.Field); err != nil {
			r.bad[v.Key] = err
			r.order = append(r.order, v.Key)
		}
	}
	return r, nil
}

// want records an error "KEY: want what, got value" when key was set and
// either did not decode or is not ok. Its text replaces the decoding error.
func (r *envRead) want(errs *[]error, key string, ok bool, what string) {
	v, set := r.raw[key]
	if !set {
		return
	}
	if _, bad := r.bad[key]; bad || !ok {
		delete(r.bad, key)
		*errs = append(*errs, fmt.Errorf("%s: want %s, got %q", key, what, v))
	}
}

// errs are the decoding errors no want took over, each naming its variable.
func (r *envRead) errs() []error {
	var errs []error
	for _, k := range r.order {
		if err, ok := r.bad[k]; ok {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
		}
	}
	return errs
}

// decodeEnv sets field from value by envconfig's rules (processField in
// envconfig v1.4).
func decodeEnv(value string, field reflect.Value) error {
	if d, ok := as[envconfig.Decoder](field); ok {
		return d.Decode(value)
	}
	if d, ok := as[envconfig.Setter](field); ok {
		return d.Set(value)
	}
	if d, ok := as[encoding.TextUnmarshaler](field); ok {
		return d.UnmarshalText([]byte(value))
	}
	if d, ok := as[encoding.BinaryUnmarshaler](field); ok {
		return d.UnmarshalBinary([]byte(value))
	}
	typ := field.Type()
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
		if field.IsNil() {
			field.Set(reflect.New(typ))
		}
		field = field.Elem()
	}
	switch typ.Kind() {
	case reflect.String:
		field.SetString(value)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var n int64
		var err error
		if typ == reflect.TypeFor[time.Duration]() {
			var d time.Duration
			d, err = time.ParseDuration(value)
			n = int64(d)
		} else {
			n, err = strconv.ParseInt(value, 0, typ.Bits())
		}
		if err != nil {
			return err
		}
		field.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(value, 0, typ.Bits())
		if err != nil {
			return err
		}
		field.SetUint(n)
	case reflect.Bool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return err
		}
		field.SetBool(b)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(value, typ.Bits())
		if err != nil {
			return err
		}
		field.SetFloat(f)
	case reflect.Slice:
		sl := reflect.MakeSlice(typ, 0, 0)
		if typ.Elem().Kind() == reflect.Uint8 {
			sl = reflect.ValueOf([]byte(value))
		} else if strings.TrimSpace(value) != "" {
			parts := strings.Split(value, ",")
			sl = reflect.MakeSlice(typ, len(parts), len(parts))
			for i, p := range parts {
				if err := decodeEnv(p, sl.Index(i)); err != nil {
					return err
				}
			}
		}
		field.Set(sl)
	default:
		return fmt.Errorf("cannot decode a %s", typ)
	}
	return nil
}

// as is field, or else its address, as a T (envconfig's interfaceFrom).
func as[T any](field reflect.Value) (T, bool) {
	if t, ok := field.Interface().(T); ok {
		return t, true
	}
	t, ok := field.Addr().Interface().(T)
	return t, ok
}

// trimList drops the spaces around a comma-separated list's items and its
// empty items ("a, b," is [a b]); envconfig keeps them.
func trimList(l []string) []string {
	var out []string
	for _, s := range l {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// nearest is the name in names nearest to s by edit distance (the first of
// equals, in the order of names).
func nearest(s string, names []string) string {
	best, dist := "", -1
	for _, n := range names {
		if d := editDistance(s, n); dist < 0 || d < dist {
			best, dist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes (the
// variable names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
