package fastschema

// ValidJSON is validJSON, for the tests.
var ValidJSON = validJSON
