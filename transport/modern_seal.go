package transport

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// requestState (SPEC §5a.6): what a modern input_required result hands the
// client to echo on its retry, sealed with AES-256-GCM under a key drawn
// at random when the endpoint starts. It binds the namespace, the method,
// the tool, prompt or resource named, a digest of the arguments, an expiry
// and a random nonce, and carries the backend's own State. Every state is
// single use: its nonce is kept until it expires. A state that does not
// open, names another namespace or request, has expired or was used gets
// one answer, the same bytes in every case.

// sealedState is the plaintext of a requestState.
type sealedState struct {
	Namespace string `json:"ns"`
	Method    string `json:"m"`
	Name      string `json:"n"`
	Args      []byte `json:"a"` // SHA-256 of the canonical arguments
	Expires   int64  `json:"e"` // Unix ms
	Nonce     []byte `json:"r"` // 16 random bytes
	State     string `json:"s"` // the backend's Response.State
	// Asked is the round's input requests by key: a form elicitation's
	// requested schema, null for any other. Only answers to these keys
	// reach the backend, a form's only if its content validates.
	Asked map[string]json.RawMessage `json:"q,omitempty"`
}

// stateAAD is the associated data of every sealed state.
var stateAAD = []byte("mcpruntime requestState v1")

// sealer seals and opens request states, and remembers the nonces used.
type sealer struct {
	aead cipher.AEAD
	ttl  time.Duration

	mu   sync.Mutex
	used map[[16]byte]time.Time // nonce → expiry
}

func newSealer(ttl time.Duration) *sealer {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return &sealer{aead: aead, ttl: ttl, used: make(map[[16]byte]time.Time)}
}

func (s *sealer) seal(st *sealedState) (string, error) {
	pt, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(pt)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, pt, stateAAD)), nil
}

// open returns the state sealed in v, or false.
func (s *sealer) open(v string) (*sealedState, bool) {
	ct, err := base64.RawURLEncoding.Strict().DecodeString(v)
	if err != nil || len(ct) < s.aead.NonceSize()+s.aead.Overhead() {
		return nil, false
	}
	pt, err := s.aead.Open(nil, ct[:s.aead.NonceSize()], ct[s.aead.NonceSize():], stateAAD)
	if err != nil {
		return nil, false
	}
	var st sealedState
	if json.Unmarshal(pt, &st) != nil || len(st.Nonce) != 16 {
		return nil, false
	}
	return &st, true
}

// consume marks nonce used until expires; false if it was already.
// Expired nonces are forgotten as new ones come.
func (s *sealer) consume(nonce []byte, expires, now time.Time) bool {
	var k [16]byte
	copy(k[:], nonce)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.used[k]; ok {
		return false
	}
	if len(s.used) >= 1024 {
		for n, e := range s.used {
			if !now.Before(e) {
				delete(s.used, n)
			}
		}
	}
	s.used[k] = expires
	return true
}

// subject is what a state is bound to besides the namespace: the request's
// tool, prompt or resource, and a digest of its arguments.
func subject(params json.RawMessage) (name string, digest []byte) {
	var args []byte
	_ = eachMember(params, func(n, value []byte) error {
		switch string(n) {
		case "name", "uri":
			_ = stringValue(value, &name)
		case "arguments":
			args = value
		}
		return nil
	})
	var v any
	if len(args) > 0 && json.Unmarshal(args, &v) == nil {
		args, _ = json.Marshal(v) // canonical: object members sorted
	}
	sum := sha256.Sum256(args)
	return name, sum[:]
}

// sealState seals the backend's state and what it asked, reqs, for the
// retry of the request of method and params. A form elicitation's requested schema that does not
// compile is the handler's fault: errBadSchema.
func (s *Server) sealState(method string, params json.RawMessage, p caller, state string, reqs mcp.InputRequestMap) (string, error) {
	name, digest := subject(params)
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	asked := make(map[string]json.RawMessage, len(reqs))
	for k, r := range reqs {
		asked[k] = json.RawMessage("null")
		if e, ok := r.(*mcp.ElicitParams); ok && e != nil && e.RequestedSchema != nil && !isURLElicitation(e) {
			if _, err := compileRequested(e.RequestedSchema); err != nil {
				return "", fmt.Errorf("%w: %v", errBadSchema, err)
			}
			asked[k], _ = json.Marshal(e.RequestedSchema)
		}
	}
	return s.sealer.seal(&sealedState{
		Namespace: p.Namespace, Method: method, Name: name, Args: digest,
		Expires: s.opts.Now().Add(s.sealer.ttl).UnixMilli(), Nonce: nonce, State: state, Asked: asked,
	})
}

// errBadSchema: a form elicitation's requested schema does not compile.
var errBadSchema = errors.New("the request's elicitation schema is invalid")

// isURLElicitation reports whether e asks in URL mode (no schema: the
// answer is an action alone).
func isURLElicitation(e *mcp.ElicitParams) bool {
	return e.Mode == "url" || e.Mode == "" && (e.URL != "" || e.ElicitationID != "")
}

// answered keeps of m the answers to what st asked: an answer under a key
// that was not asked goes, and so does a form's whose action is not one
// MCP defines or whose accepted content does not validate against the
// requested schema — as a session's invalid answer counts as none, so
// the handler asks again.
func answered(m mcp.InputResponseMap, st *sealedState) {
	for k, v := range m {
		raw, asked := st.Asked[k]
		if !asked {
			delete(m, k)
			continue
		}
		if string(raw) == "null" {
			continue
		}
		e, ok := v.(*mcp.ElicitResult)
		if !ok {
			delete(m, k)
			continue
		}
		result, _ := json.Marshal(e)
		sch, err := compileRequested(raw)
		if err != nil {
			delete(m, k)
			continue
		}
		if _, ok := decodeElicit(result, &question{schema: sch}); !ok {
			delete(m, k)
		}
	}
}

// openState reads a retry's params.requestState and params.inputResponses
// (the request of method) into req.State and req.InputResponses; with a state, only the answers
// to what it sealed, checked (answered); without one — the revision's
// stateless first round with answers — every answer by its shape. A requestState that does not open
// for this namespace and request, has expired or was used is refused;
// inputResponses must be an object of answers (null or absent: none), each
// an object: one of a shape no input request has is ignored, any other
// value refused (-32602).
func (s *Server) openState(req *Request, method string, params json.RawMessage, p caller) *rejection {
	var state, responses []byte
	var opened *sealedState
	_ = eachMember(params, func(n, value []byte) error {
		switch string(n) {
		case "requestState":
			state = value
		case "inputResponses":
			responses = value
		}
		return nil
	})
	if state != nil && string(state) != "null" {
		var v string
		if state[0] != '"' || stringValue(state, &v) != nil {
			return &rejection{f: failRequestState}
		}
		st, ok := s.sealer.open(v)
		name, digest := subject(params)
		now := s.opts.Now()
		expires := time.UnixMilli(st.expires())
		if !ok || st.Namespace != p.Namespace || st.Method != method || st.Name != name ||
			!bytes.Equal(st.Args, digest) || !now.Before(expires) || !s.sealer.consume(st.Nonce, expires, now) {
			return &rejection{f: failRequestState}
		}
		req.State = st.State
		opened = st
	}
	if responses == nil || string(responses) == "null" {
		return nil
	}
	if responses[0] != '{' {
		return &rejection{f: failModernMeta, message: "params.inputResponses must be an object"}
	}
	m := mcp.InputResponseMap{}
	var bad bool
	_ = eachMember(responses, func(n, value []byte) error {
		if value[0] != '{' {
			bad = true
			return nil
		}
		var one mcp.InputResponseMap
		key := string(n)
		wrapped, _ := json.Marshal(map[string]json.RawMessage{key: value})
		if json.Unmarshal(wrapped, &one) == nil {
			m[key] = one[key]
		}
		return nil
	})
	if bad {
		return &rejection{f: failModernMeta, message: "params.inputResponses: every answer must be an object"}
	}
	if opened != nil {
		answered(m, opened)
	}
	req.InputResponses = m
	return nil
}

func (st *sealedState) expires() int64 {
	if st == nil {
		return 0
	}
	return st.Expires
}
