// Package strictjson checks JSON object keys against a Go struct exactly.
// encoding/json matches keys case-insensitively even with
// DisallowUnknownFields, so {"CONCURRENCY":{...}} would pass for
// "concurrency": a config file must spell its keys as documented.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// ErrEmpty is returned by Decode for input without a JSON value.
var ErrEmpty = errors.New("empty file: want a JSON object such as {}")

// ErrTrailing is returned by Decode for data after the JSON value.
var ErrTrailing = errors.New("trailing data after the JSON object")

// Decode decodes data into v (over what v already holds) with the rules a
// config file needs: keys spelled exactly as documented, no unknown keys,
// nothing after the object.
func Decode(data []byte, v any) error {
	if err := CheckKeys(data, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return ErrEmpty
		}
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return ErrTrailing
	}
	return nil
}

// CheckKeys reports the first key in data that is not spelled exactly like
// a json tag (or field name) of v's type, naming its path, e.g.
// `unknown key "Listen" (at the top level)`. Values that do not decode are
// left to the decoder to report.
func CheckKeys(data []byte, v any) error {
	t := reflect.TypeOf(v)
	var raw any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil // the real decode reports syntax errors
	}
	return check(raw, t, "")
}

func check(raw any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := raw.(map[string]any)
		if !ok {
			return nil
		}
		fields := map[string]reflect.Type{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := f.Name
			if tag, ok := f.Tag.Lookup("json"); ok {
				n, _, _ := strings.Cut(tag, ",")
				if n == "-" {
					continue
				}
				if n != "" {
					name = n
				}
			}
			fields[name] = f.Type
		}
		for k, val := range obj {
			ft, ok := fields[k]
			if !ok {
				where := "at the top level"
				if path != "" {
					where = "in " + path
				}
				return fmt.Errorf("unknown key %q (%s; keys are case-sensitive)", k, where)
			}
			if err := check(val, ft, join(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		arr, ok := raw.([]any)
		if !ok {
			return nil
		}
		for i, e := range arr {
			if err := check(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		obj, ok := raw.(map[string]any)
		if !ok {
			return nil
		}
		for k, e := range obj {
			if err := check(e, t.Elem(), join(path, k)); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}
