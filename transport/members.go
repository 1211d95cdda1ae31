package transport

import "encoding/json"

// EachMember calls fn with the name (unescaped) and the raw value of every
// member of the JSON object obj, in order, without decoding the values: the
// backend reads a request's params with it on the hot path. An obj that is
// not a valid JSON object is an error.
func EachMember(obj []byte, fn func(name, value []byte) error) error {
	if !json.Valid(obj) {
		return errInvalid
	}
	return eachMember(obj, fn)
}

// StringValue decodes a JSON string value (or null, as "") into dst; any
// other value is an error.
func StringValue(value []byte, dst *string) error { return stringValue(value, dst) }
