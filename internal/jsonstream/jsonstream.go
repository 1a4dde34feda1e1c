// Package jsonstream writes and reads a JSON document made of a header's
// fields and one long array, {"a":...,"b":...,"items":[...]}, one array
// element at a time: a state file of millions of elements is never built
// or read in memory as one document, and stays readable by encoding/json
// as one. Earlier builds kept a bucket's listing and a shards index so;
// they are read once and kept since in internal/binfile's form, and Write
// makes such files for the tests of that.
//
// It is a leaf: it imports only the standard library.
package jsonstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Write writes head (a value that marshals to a JSON object with at least
// one field) with the field array added after its own: an array of n
// elements, element i marshalled from item(i).
func Write(w io.Writer, head any, array string, n int, item func(i int) any) error {
	h, err := json.Marshal(head)
	if err != nil {
		return err
	}
	if len(h) < 2 || h[0] != '{' || h[len(h)-1] != '}' || string(h) == "{}" {
		return fmt.Errorf("jsonstream: the header %s is not an object with fields", h)
	}
	name, err := json.Marshal(array)
	if err != nil {
		return err
	}
	// The header without its closing brace, then the array.
	h = append(append(append(h[:len(h)-1], ','), name...), ":["...)
	if _, err := w.Write(h); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	for i := range n {
		if i > 0 {
			if _, err := io.WriteString(w, ","); err != nil {
				return err
			}
		}
		if err := enc.Encode(item(i)); err != nil {
			return err
		}
	}
	_, err = io.WriteString(w, "]}\n")
	return err
}

// ErrNoArray is returned by Read for a document without the array.
var ErrNoArray = errors.New("jsonstream: no array")

// Read reads a JSON object from dec, in any field order: each field named
// in fields is decoded into the pointer it maps to, the field array is
// read one element at a time by each (which decodes one value from dec),
// and other fields are skipped. A document without the array, or with
// null for it, gives ErrNoArray.
func Read(dec *json.Decoder, fields map[string]any, array string, each func(dec *json.Decoder) error) error {
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fmt.Errorf("jsonstream: not an object (%v)", err)
	}
	found := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := t.(string) // an object's keys are strings
		if name == array {
			if t, err := dec.Token(); err != nil || t != json.Delim('[') {
				return fmt.Errorf("jsonstream: %s: not an array (%v)", array, err)
			}
			for dec.More() {
				if err := each(dec); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil { // ]
				return err
			}
			found = true
			continue
		}
		field, ok := fields[name]
		if !ok {
			field = new(json.RawMessage) // a field of a later format: skipped
		}
		if err := dec.Decode(field); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // }
		return err
	}
	if !found {
		return ErrNoArray
	}
	return nil
}
