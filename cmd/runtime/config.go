package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/alecthomas/kong"
)

// One set of names. A setting is a flag tagged `config:""`; its flag name
// is its config file key, and RUNTIME_ + the name in upper case with "-"
// as "_" is its environment variable. The precedence is
//
//	flag > environment > config file > default
//
// Kong applies resolvers only to flags not given on the command line, and
// the one resolver below looks at the environment before the file. The
// settings are documented in docs/configuration.md (generated from them) and by
// `runtime --help`.

const (
	envPrefix     = "RUNTIME_"
	envConfig     = "RUNTIME_CONFIG"
	envAdminToken = "RUNTIME_ADMIN_TOKEN" // the admin token itself: env only, never a flag or a file key
)

// envName is the environment variable of a setting.
func envName(setting string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(setting, "-", "_"))
}

// isSetting reports whether a flag is a setting (env and file capable).
func isSetting(f *kong.Flag) bool { return f.Tag.Has("config") }

// fileKey reports whether a setting may appear in the config file: all do
// except the path of the file itself.
func fileKey(f *kong.Flag) bool { return isSetting(f) && f.Name != "config" }

// settings resolves settings from the environment, then the config file.
type settings struct {
	env    map[string]string
	path   string         // config file in use, "" if none
	values map[string]any // its keys
	loaded bool
}

// load reads the config file named by --config (already parsed from the
// command line, if given there) or RUNTIME_CONFIG. It runs before any
// setting is resolved, and checks every key of the file against every
// setting of the application, whichever command runs.
func (s *settings) load(kctx *kong.Context) error {
	if s.loaded {
		return nil
	}
	s.loaded = true
	known := map[string]bool{}
	var configFlag *kong.Flag
	err := kong.Visit(kctx.Model.Node, func(node kong.Visitable, next kong.Next) error {
		if f, ok := node.(*kong.Flag); ok {
			if fileKey(f) {
				known[f.Name] = true
			}
			if f.Name == "config" && configFlag == nil {
				configFlag = f
			}
		}
		return next(nil)
	})
	if err != nil {
		return err
	}
	if configFlag != nil {
		if v, ok := kctx.FlagValue(configFlag).(string); ok {
			s.path = v
		}
	}
	if s.path == "" {
		s.path = s.env[envConfig]
	}
	if s.path == "" {
		return nil
	}
	values, err := readConfigFile(s.path, known)
	if err != nil {
		return err
	}
	s.values = values
	return nil
}

// readConfigFile decodes a TOML config file whose keys must all be known.
func readConfigFile(path string, known map[string]bool) (map[string]any, error) {
	values := map[string]any{}
	md, err := toml.DecodeFile(path, &values)
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return nil, fmt.Errorf("config file %s: %s", path, perr.ErrorWithPosition())
		}
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	var unknown []string
	for _, k := range md.Keys() {
		if len(k) != 1 || !known[k[0]] {
			unknown = append(unknown, k.String())
		}
	}
	if len(unknown) > 0 {
		keys := make([]string, 0, len(known))
		for k := range known {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return nil, fmt.Errorf("config file %s: unknown key %s (known keys: %s)",
			path, strings.Join(quoteAll(unknown), ", "), strings.Join(keys, ", "))
	}
	return values, nil
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// Validate implements kong.Resolver.
func (s *settings) Validate(*kong.Application) error { return nil }

// Resolve implements kong.Resolver: the environment, then the file.
func (s *settings) Resolve(kctx *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
	if !isSetting(flag) {
		return nil, nil
	}
	if err := s.load(kctx); err != nil {
		return nil, err
	}
	name := envName(flag.Name)
	if v, ok := s.env[name]; ok {
		return v, check(flag, v, fmt.Sprintf("from $%s=%q", name, v))
	}
	if !fileKey(flag) {
		return nil, nil
	}
	raw, ok := s.values[flag.Name]
	if !ok {
		return nil, nil
	}
	v, err := fileString(raw, flag.Target.Type())
	if err != nil {
		return nil, fmt.Errorf("config file %s: key %q: %w", s.path, flag.Name, err)
	}
	return v, check(flag, v, fmt.Sprintf("from config file %s key %q = %q", s.path, flag.Name, v))
}

// check decodes v into a scratch value of the flag's type, so that a bad
// value names where it came from.
func check(flag *kong.Flag, v, source string) error {
	target := reflect.New(flag.Target.Type()).Elem()
	scan := kong.ScanFromTokens(kong.Token{Type: kong.FlagValueToken, Value: v})
	if err := flag.Mapper.Decode(&kong.DecodeContext{Value: flag.Value, Scan: scan}, target); err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	return nil
}

// fileString turns a TOML value into the string a flag would be given,
// checking that its TOML type fits the setting: a boolean for a switch, an
// integer for a count, an array of strings for a list, a string for the
// rest (a size may also be an integer).
func fileString(v any, target reflect.Type) (string, error) {
	want := "a string"
	switch {
	case target.Kind() == reflect.Bool:
		if b, ok := v.(bool); ok {
			return strconv.FormatBool(b), nil
		}
		want = "a boolean"
	case target.Kind() == reflect.Slice:
		if arr, ok := v.([]any); ok {
			parts := make([]string, len(arr))
			for i, e := range arr {
				s, ok := e.(string)
				if !ok || strings.Contains(s, ",") {
					return "", fmt.Errorf("want an array of strings without commas, got element %#v", e)
				}
				parts[i] = s
			}
			return strings.Join(parts, ","), nil
		}
		want = "an array of strings"
	case target == reflect.TypeFor[byteSize]():
		switch n := v.(type) {
		case int64:
			return strconv.FormatInt(n, 10), nil
		case string:
			return n, nil
		}
		want = "an integer or a string such as \"4MiB\""
	case target.Kind() == reflect.Int:
		if n, ok := v.(int64); ok {
			return strconv.FormatInt(n, 10), nil
		}
		want = "an integer"
	default:
		if s, ok := v.(string); ok {
			return s, nil
		}
	}
	return "", fmt.Errorf("want %s, got %T %#v", want, v, v)
}

// helpValue adds each setting's environment variable and file key to its
// help text.
func helpValue(v *kong.Value) string {
	if v.Flag == nil || !isSetting(v.Flag) {
		return v.Help
	}
	where := "$" + envName(v.Name)
	if fileKey(v.Flag) {
		where += ", file key " + v.Name
	}
	if v.HasDefault && v.Default != "" {
		where = "default " + v.Default + "; " + where
	}
	return strings.TrimSuffix(v.Help, ".") + " (" + where + ")."
}

// duration is a time.Duration setting that may also be "never".
type duration time.Duration

const never = duration(-1)

func (d *duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "never" {
		*d = never
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 90s, 30m or 24h: %w", err)
	}
	*d = duration(v)
	return nil
}

func (d duration) String() string {
	if d == never {
		return "never"
	}
	return time.Duration(d).String()
}

// byteSize is a size in bytes, written as a plain number or with a KiB,
// MiB or GiB suffix.
type byteSize int64

func (b *byteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > (1<<62)/mult {
		return fmt.Errorf("want a size in bytes such as 4194304 or 4MiB, got %q", string(text))
	}
	*b = byteSize(n * mult)
	return nil
}

// checkAddr checks a listen address: host:port, the port a number (0 picks
// a free one), the host an IP, a name, or empty (every interface).
func checkAddr(name, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--%s %q: want host:port such as 127.0.0.1:7331: %w", name, addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("--%s %q: port %q is not a number from 0 to 65535", name, addr, port)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("--%s %q: host %q is not an IP address or a host name", name, addr, host)
	}
	return nil
}

// loopback reports whether a listen address stays on this machine.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// defaultTokenFile is where the admin token file goes unless told: a
// per-user directory, so that `runtime admin …` finds it with no flag.
func defaultTokenFile(env map[string]string) string {
	switch {
	case env["XDG_RUNTIME_DIR"] != "":
		return filepath.Join(env["XDG_RUNTIME_DIR"], "mcpruntime", "admin-token")
	case env["XDG_CACHE_HOME"] != "":
		return filepath.Join(env["XDG_CACHE_HOME"], "mcpruntime", "admin-token")
	case env["HOME"] != "":
		return filepath.Join(env["HOME"], ".cache", "mcpruntime", "admin-token")
	}
	return ""
}

// checkURL checks the admin API's base URL.
func checkURL(name, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--%s %q: want an http(s) URL such as http://127.0.0.1:7332", name, raw)
	}
	return u, nil
}

// environ turns os.Environ into a map.
func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
