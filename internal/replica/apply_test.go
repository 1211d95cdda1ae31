package replica

import (
	stdjson "encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/agenthost/mcpruntime/memdb"
)

// TestDecodeRowAsEncodingJSON: decodeRow reads every replicated record
// that encoding/json wrote (as the commit writes it) exactly as
// encoding/json reads it back: any text (escapes, non-ASCII, invalid
// UTF-8), times of any zone and precision, nil and empty lists, nested
// runs and messages.
func TestDecodeRowAsEncodingJSON(t *testing.T) {
	str := rapid.OneOf(rapid.String(), rapid.Custom(func(t *rapid.T) string {
		return string(rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")) // invalid UTF-8 too
	}))
	times := rapid.Custom(func(t *rapid.T) time.Time {
		zone := time.FixedZone("z", rapid.IntRange(-12*3600, 14*3600).Draw(t, "offset"))
		return time.Unix(rapid.Int64Range(-1<<34, 1<<34).Draw(t, "sec"), rapid.Int64Range(0, 999_999_999).Draw(t, "nsec")).In(zone)
	})
	strs := rapid.Custom(func(t *rapid.T) []string {
		if rapid.Bool().Draw(t, "nil") {
			return nil
		}
		return rapid.SliceOf(str).Draw(t, "strs")
	})
	records := rapid.Custom(func(t *rapid.T) any {
		switch rapid.SampledFrom([]string{memdb.TableThreads, memdb.TableCredentials, memdb.TableClientGrants}).Draw(t, "table") {
		case memdb.TableThreads:
			th := &memdb.Thread{ID: str.Draw(t, "id"), Home: str.Draw(t, "home"), Status: str.Draw(t, "status"),
				Instance: str.Draw(t, "instance"), NextSeq: rapid.Uint64().Draw(t, "next"),
				Created: times.Draw(t, "created"), LastTurn: times.Draw(t, "last")}
			if rapid.Bool().Draw(t, "run") {
				th.Run = &memdb.Run{ID: str.Draw(t, "run id"), Instance: str.Draw(t, "run instance"), Started: times.Draw(t, "started")}
			}
			for i := range rapid.IntRange(0, 3).Draw(t, "messages") {
				th.Messages = append(th.Messages, memdb.Message{Seq: uint64(i), Text: str.Draw(t, "text"),
					Author: str.Draw(t, "author"), Instance: str.Draw(t, "minstance"), At: times.Draw(t, "at")})
			}
			return th
		case memdb.TableCredentials:
			return &memdb.Credential{ID: str.Draw(t, "id"), TokenHash: str.Draw(t, "hash"), Kind: str.Draw(t, "kind"),
				Namespace: str.Draw(t, "ns"), Thread: str.Draw(t, "thread"), Instance: str.Draw(t, "instance"),
				Client: str.Draw(t, "client"), Access: str.Draw(t, "access"), Audience: str.Draw(t, "audience"),
				OAuthClient: str.Draw(t, "oauth"), Capabilities: strs.Draw(t, "caps"), Issued: times.Draw(t, "issued"),
				LastLive: times.Draw(t, "live"), Expires: times.Draw(t, "expires"), State: str.Draw(t, "state"),
				RevokeReason: str.Draw(t, "reason"), Revoked: times.Draw(t, "revoked")}
		default:
			return &memdb.ClientGrant{ID: str.Draw(t, "id"), Home: str.Draw(t, "home"), Label: str.Draw(t, "label"),
				Access: str.Draw(t, "access"), State: str.Draw(t, "state"), Created: times.Draw(t, "created"),
				Refresh: memdb.RefreshFamily{OAuthClient: str.Draw(t, "oauth"), KeyHash: str.Draw(t, "key"), Generation: rapid.Uint64().Draw(t, "gen")},
				Via:     str.Draw(t, "via")}
		}
	})
	rapid.Check(t, func(t *rapid.T) {
		rec := records.Draw(t, "record")
		var table string
		switch rec.(type) {
		case *memdb.Thread:
			table = memdb.TableThreads
		case *memdb.Credential:
			table = memdb.TableCredentials
		case *memdb.ClientGrant:
			table = memdb.TableClientGrants
		}
		value, err := stdjson.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		want, err := memdb.NewRecord(table)
		if err != nil {
			t.Fatal(err)
		}
		if err := stdjson.Unmarshal(value, want); err != nil {
			t.Fatal(err)
		}
		got, err := decodeRow(table, memdb.RowID(want), value)
		if err != nil {
			t.Fatalf("decodeRow(%s): %v", value, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("decodeRow(%s) (-encoding/json +decodeRow):\n%s", value, diff)
		}
	})
}

// TestDecodeRowRefuses: a value that is not JSON, or the JSON of another
// row than its key names, is refused.
func TestDecodeRowRefuses(t *testing.T) {
	tests := []struct {
		name, table, id, value string
	}{
		{"not JSON", memdb.TableCredentials, "c1", `{"ID":"c1"`},
		{"another row", memdb.TableCredentials, "c1", `{"ID":"c2"}`},
		{"no id", memdb.TableThreads, "t1", `{}`},
		{"not a replicated table", memdb.TableMCPSessions, "s1", `{"ID":"s1"}`},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if rec, err := decodeRow(test.table, test.id, []byte(test.value)); err == nil {
				t.Errorf("decodeRow(%s, %s, %s) = %+v, want an error", test.table, test.id, test.value, rec)
			}
		})
	}
}
