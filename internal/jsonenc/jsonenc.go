// Package jsonenc marks JSON this module encoded itself, so that the
// endpoint copies it to the wire as it is instead of scanning it again.
//
// encoding/json writes a json.RawMessage by compacting and HTML-escaping
// it, a scan of every byte (about three times the cost of encoding a small
// struct in the first place). A value of Encoded can only come from
// Marshal, so its bytes are already what that scan would write.
package jsonenc

import "encoding/json"

// Encoded is the JSON encoding of a value as json.Marshal wrote it: valid,
// compact and HTML-safe. The zero Encoded is JSON null.
type Encoded struct {
	b []byte
}

// Marshal encodes v with json.Marshal.
func Marshal(v any) (Encoded, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Encoded{}, err
	}
	return Encoded{b: b}, nil
}

// Bytes is the encoding; the caller must not modify it.
func (e Encoded) Bytes() []byte {
	if e.b == nil {
		return []byte("null")
	}
	return e.b
}

// JSON is v's encoding: an Encoded's bytes as they are, any other
// value's from json.Marshal.
func JSON(v any) ([]byte, error) {
	if e, ok := v.(Encoded); ok {
		return e.Bytes(), nil
	}
	return json.Marshal(v)
}

// MarshalJSON makes an Encoded encode as the value it holds wherever
// encoding/json meets it.
func (e Encoded) MarshalJSON() ([]byte, error) {
	return e.Bytes(), nil
}
