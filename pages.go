package mcpruntime

import (
	"encoding/base64"
	"slices"
	"strings"
)

// Pagination of the MCP lists (SPEC §5b.4). A cursor is opaque to clients:
// the list's kind, a version and the key the page ended at, encoded. A page
// holds what the caller may see, in key order; a cursor continues after its
// key whatever was added or removed since, so nothing appears twice.

// DefaultListPageSize is the number of entries of an MCP list page
// (tools/list, resources/list, resources/templates/list, prompts/list)
// when MCPOptions.ListPageSize is zero.
const DefaultListPageSize = 100

// errInvalidCursor is a cursor no list of that kind returned: -32602.
var errInvalidCursor = ErrInvalidCursor

func encodeListCursor(kind, key string) string {
	return kind + "1." + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// decodeListCursor returns the key a cursor of kind continues after; "" and
// no error for no cursor.
func decodeListCursor(kind, cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	rest, ok := strings.CutPrefix(cursor, kind+"1.")
	key, err := base64.RawURLEncoding.DecodeString(rest)
	if !ok || err != nil || len(key) == 0 {
		return "", errInvalidCursor
	}
	return string(key), nil
}

// listPage returns the page of keys (sorted) after cursor's key that
// visible admits, at most size of them, and the cursor of the next page
// ("" on the last).
func listPage[T any](kind string, keys []string, cursor string, size int, visible func(key string) (T, bool)) ([]T, string, error) {
	after, err := decodeListCursor(kind, cursor)
	if err != nil {
		return nil, "", err
	}
	i := 0
	if after != "" {
		i, _ = slices.BinarySearch(keys, after)
		if i < len(keys) && keys[i] == after {
			i++
		}
	}
	out := make([]T, 0, min(size, len(keys)-i))
	last := ""
	for ; i < len(keys); i++ {
		v, ok := visible(keys[i])
		if !ok {
			continue
		}
		if len(out) == size {
			return out, encodeListCursor(kind, last), nil
		}
		out = append(out, v)
		last = keys[i]
	}
	return out, "", nil
}
