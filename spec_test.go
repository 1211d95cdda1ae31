package mcpruntime_test

import (
	"bufio"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// specSections reads docs/SPEC.md and returns what a reference may name:
// its sections ("## 5. …" is "5", "## 5a. …" is "5a"), its numbered
// paragraphs ("**5.3 Limits.**" is "5.3"), the numbered items of a section
// ("6. …" under "## 6." is "6.6"), and the steps of §5's table (its second
// column).
func specSections(t *testing.T) (sections map[string]bool, steps map[int]bool) {
	t.Helper()
	f, err := os.Open(filepath.Join("docs", "SPEC.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	heading := regexp.MustCompile(`^## ([0-9]+[a-z]?)\. `)
	para := regexp.MustCompile(`^\*\*([0-9]+[a-z]?\.[0-9]+) `)
	item := regexp.MustCompile(`^([0-9]+)\. `)
	stepRow := regexp.MustCompile(`^\| [0-9]+ \| ([0-9, ]+) \|`)
	sections, steps = map[string]bool{}, map[int]bool{}
	current := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case heading.MatchString(line):
			current = heading.FindStringSubmatch(line)[1]
			sections[current] = true
		case para.MatchString(line):
			sections[para.FindStringSubmatch(line)[1]] = true
		case item.MatchString(line) && current != "":
			sections[current+"."+item.FindStringSubmatch(line)[1]] = true
		case current == "5" && stepRow.MatchString(line):
			for _, n := range strings.Split(stepRow.FindStringSubmatch(line)[1], ",") {
				if k, err := strconv.Atoi(strings.TrimSpace(n)); err == nil {
					steps[k] = true
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sections, steps
}

// specRef is one run of references: "SPEC §5 step 3, §6.3", "SPEC §6.2–3",
// "(§3.6)" inside docs/SPEC.md itself.
var specRef = regexp.MustCompile(`§([0-9]+[a-z]?(?:\.[0-9]+)?(?:–[0-9]+)?)((?: steps? [0-9]+(?:[–-][0-9]+)?(?:,? (?:and )?[0-9]+)*)?)`)

// references returns the references of one line: sections and, for §5,
// step numbers. Outside docs/SPEC.md only a run that starts with "SPEC §"
// counts (the rest, "RFC 8259 §8.1", names other documents).
func references(line string, inSpec bool) (secs []string, steps []int) {
	runs := []string{line}
	if !inSpec {
		runs = nil
		for _, part := range strings.Split(line, "SPEC §")[1:] {
			// The run ends where the references end: at the first word that
			// is not one of them.
			runs = append(runs, "§"+part)
		}
	}
	for _, run := range runs {
		pos := 0
		for _, m := range specRef.FindAllStringSubmatchIndex(run, -1) {
			if !inSpec && m[0] != pos && !onlyGlue(run[pos:m[0]]) {
				break
			}
			pos = m[1]
			ref := run[m[2]:m[3]]
			if base, hi, ok := strings.Cut(ref, "–"); ok {
				major, lo, _ := strings.Cut(base, ".")
				from, _ := strconv.Atoi(lo)
				to, _ := strconv.Atoi(hi)
				for k := from; k <= to; k++ {
					secs = append(secs, major+"."+strconv.Itoa(k))
				}
			} else {
				secs = append(secs, ref)
			}
			if ref == "5" && m[4] < m[5] {
				for _, n := range regexp.MustCompile(`[0-9]+`).FindAllString(run[m[4]:m[5]], -1) {
					k, _ := strconv.Atoi(n)
					steps = append(steps, k)
				}
			}
		}
	}
	return secs, steps
}

// onlyGlue reports whether s only joins two references: ", ", " and ".
func onlyGlue(s string) bool {
	return strings.Trim(s, ", ;and") == ""
}

// TestSPECReferencesResolve: every "SPEC §n" in the code, the tests and
// the docs names a section of docs/SPEC.md that exists, and every "SPEC §5
// step n" a step of its table.
func TestSPECReferencesResolve(t *testing.T) {
	sections, steps := specSections(t)
	for _, want := range []string{"1", "3.6", "5", "5.3", "5a", "6.7", "7.3"} {
		if !sections[want] {
			t.Fatalf("docs/SPEC.md parsed without §%s: the parser no longer matches its headings", want)
		}
	}
	if len(steps) != 7 {
		t.Fatalf("docs/SPEC.md §5 steps parsed: %v, want 0–6: the parser no longer matches its table", steps)
	}
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (name == "bench" || name == "node_modules" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir // bench/ is a module of its own, with its own notes; node_modules is npm's
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".txtar", ".sh", ".mut":
		default:
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		inSpec := path == filepath.Join("docs", "SPEC.md")
		for i, line := range strings.Split(string(src), "\n") {
			secs, stepRefs := references(line, inSpec)
			for _, s := range secs {
				n++
				if !sections[s] {
					t.Errorf("%s:%d: SPEC §%s: no such section in docs/SPEC.md", path, i+1, s)
				}
			}
			for _, k := range stepRefs {
				if !steps[k] {
					t.Errorf("%s:%d: SPEC §5 step %d: no such step in docs/SPEC.md §5", path, i+1, k)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("found %d references: the scan no longer finds them", n)
	}
}

func TestSPECReferenceParsing(t *testing.T) {
	for _, tt := range []struct {
		line      string
		inSpec    bool
		wantSecs  []string
		wantSteps []int
	}{
		{line: "// (SPEC §5 step 3, §6.3): it", wantSecs: []string{"5", "6.3"}, wantSteps: []int{3}},
		{line: "// SPEC §5 step 3 and §6.2–3 over real HTTP", wantSecs: []string{"5", "6.2", "6.3"}, wantSteps: []int{3}},
		{line: "// SPEC §5 steps 1–5 in order, with step 0", wantSecs: []string{"5"}, wantSteps: []int{1, 5}},
		{line: "// The built-in tools of SPEC §4. Hosts add", wantSecs: []string{"4"}},
		{line: "// checks (SPEC §4, §6.6).", wantSecs: []string{"4", "6.6"}},
		{line: "// (step 5, SPEC §5a); RFC 8259 §8.1", wantSecs: []string{"5a"}},
		{line: "// valid UTF-8 (RFC 8259 §8.1: JSON text is UTF-8)"},
		{line: "provider kinds as drivers (§3.6).", inSpec: true, wantSecs: []string{"3.6"}},
	} {
		secs, steps := references(tt.line, tt.inSpec)
		if strings.Join(secs, " ") != strings.Join(tt.wantSecs, " ") || len(steps) != len(tt.wantSteps) {
			t.Errorf("references(%q) = %v, %v; want %v, %v", tt.line, secs, steps, tt.wantSecs, tt.wantSteps)
			continue
		}
		for i := range steps {
			if steps[i] != tt.wantSteps[i] {
				t.Errorf("references(%q) steps = %v, want %v", tt.line, steps, tt.wantSteps)
			}
		}
	}
}

// mcpMethodPrefixes are the first elements of MCP method names: with a
// trailing "/" ("notifications/") they name methods, not folders.
var mcpMethodPrefixes = map[string]bool{
	"notifications": true, "tools": true, "resources": true, "prompts": true, "completion": true,
	"sampling": true, "elicitation": true, "roots": true, "logging": true, "subscriptions": true, "server": true,
}

// agentsFiles are files an agent reads in its own project or home, named
// in the drivers' docs (OpenCode's project file, the claude driver's
// --mcp-config file in a session's private directory), not files of this
// repository.
var agentsFiles = map[string]bool{"opencode.json": true, "mcp.json": true}

// pathExts are the extensions that make a lone word (no slash) a file
// name: "backend.go", "README.md".
var pathExts = []string{".go", ".md", ".sh", ".json", ".txtar", ".mut", ".py", ".toml", ".golden", ".mod", ".sum", ".png"}

// modulePath is the import path of the root module; an import path below
// it cites the folder it names ("github.com/agenthost/mcpruntime/transport"
// is transport/).
const modulePath = "github.com/agenthost/mcpruntime"

// pathWordSep splits a line into words: spaces, quotes and brackets, and
// the separators of tables, flags and lists. A comma inside {a,b} is not
// one (see splitWords).
var pathWordSep = regexp.MustCompile("[\\s`'\"()\\[\\]|=;]+")

// lineSuffix is a cited line or line range: "transport/handlers.go:250",
// "runtime.go:705-711".
var lineSuffix = regexp.MustCompile(`:[0-9]+(-[0-9]+)?$`)

// splitWords splits text at pathWordSep and at commas outside braces,
// and drops empty words.
func splitWords(text string) []string {
	var words []string
	for _, w := range pathWordSep.Split(text, -1) {
		depth, start := 0, 0
		for i, r := range w {
			switch r {
			case '{':
				depth++
			case '}':
				depth--
			case ',':
				if depth == 0 {
					words = append(words, w[start:i])
					start = i + 1
				}
			}
		}
		words = append(words, w[start:])
	}
	return slices.DeleteFunc(words, func(w string) bool { return w == "" })
}

// expandBraces expands the first {a,b} list of p, and so on recursively:
// "bench/cmd/{server,load}" is "bench/cmd/server" and "bench/cmd/load".
func expandBraces(p string) []string {
	i := strings.Index(p, "{")
	j := strings.Index(p, "}")
	if i < 0 || j < i {
		return []string{p}
	}
	var out []string
	for _, alt := range strings.Split(p[i+1:j], ",") {
		out = append(out, expandBraces(p[:i]+alt+p[j+1:])...)
	}
	return out
}

// citedPaths returns the repository paths word cites, slash-separated
// and without a line suffix; nil when it cites none. A word is a path when
// it has a known extension (pathExts), starts with "./" or "../", ends in
// "/", or has a "/" after a first element that is a top-level folder
// (tops: "internal/liveness", "actors/thread"). Not paths: URLs, import
// paths other than the module's own, absolute paths ("/tmp/…", HTTP
// routes such as "/admin/v1/threads"), "$XDG…" and "~" paths, globs,
// placeholders ("thread/<id>") and elisions ("cmd/…", "./...").
func citedPaths(word string, tops map[string]bool) []string {
	w := strings.TrimLeft(word, "*")
	if strings.HasPrefix(word, "**") || strings.HasSuffix(word, "**") {
		w = strings.Trim(word, "*") // Markdown bold, not a glob
	} else if w != word {
		return nil // a glob: "*_test.go"
	}
	if strings.Contains(w, "...") {
		return nil // an elision: "./..."
	}
	w = strings.TrimRight(w, ".,:;!?")
	if k := strings.IndexByte(w, '#'); k >= 0 {
		w = w[:k] // a Markdown anchor
	}
	w = lineSuffix.ReplaceAllString(w, "")
	if w == "" || strings.Contains(w, "://") || strings.ContainsAny(w, "$~*%@…<>") {
		return nil
	}
	if rest, ok := strings.CutPrefix(w, modulePath); ok {
		if rest == "" || rest[0] != '/' {
			return nil
		}
		return []string{rest[1:]}
	}
	if strings.HasPrefix(w, "/") {
		return nil
	}
	if k := strings.LastIndexByte(w, '/'); k >= 0 {
		if dot := strings.IndexByte(w[k:], '.'); dot > 0 && k+dot+1 < len(w) && unicode.IsUpper(rune(w[k+dot+1])) {
			w = w[:k+dot] // a package's identifier: "internal/oauth.Grants"
		}
	}
	first, _, hasSlash := strings.Cut(w, "/")
	var isPath bool
	switch {
	case strings.HasPrefix(w, "./"), strings.HasPrefix(w, "../"):
		isPath = true
	case hasSlash && strings.Contains(first, "."):
		return nil // an import path: "github.com/…", "go.etcd.io/…"
	case hasSlash && (tops[first] || strings.HasSuffix(w, "/") && !mcpMethodPrefixes[first]):
		isPath = true
	default:
		for _, ext := range pathExts {
			if strings.HasSuffix(w, ext) && len(w) > len(ext) {
				isPath = true
			}
		}
	}
	if !isPath || agentsFiles[w] {
		return nil
	}
	return expandBraces(w)
}

// pathExists reports whether p names a file or folder relative to one of
// bases.
func pathExists(p string, bases ...string) bool {
	for _, b := range bases {
		if _, err := os.Stat(filepath.Join(b, filepath.FromSlash(p))); err == nil {
			return true
		}
	}
	return false
}

// goComments returns the comment lines of a Go file with their line
// numbers, but not an example's "// Output:" block, which is output, not
// citations.
func goComments(src []byte) (lines []string, nums []int) {
	fset := token.NewFileSet()
	file := fset.AddFile("", fset.Base(), len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, scanner.ScanComments)
	output, last := false, 0 // in an Output block; the line of the last comment
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return lines, nums
		}
		if tok != token.COMMENT {
			continue
		}
		first := fset.Position(pos).Line
		output = output && first == last+1
		last = first
		if text := strings.TrimSpace(strings.TrimPrefix(lit, "//")); text == "Output:" || text == "Unordered output:" {
			output = true
		}
		if output {
			continue
		}
		for i, l := range strings.Split(lit, "\n") {
			lines = append(lines, l)
			nums = append(nums, first+i)
		}
	}
}

// markdownProse returns a Markdown file's lines with their numbers, less
// the lines of its Go code blocks: the names of files in example code
// are the example's data, not citations of the repository's files.
func markdownProse(src []byte) (lines []string, nums []int) {
	inGo, inFence := false, false
	for i, line := range strings.Split(string(src), "\n") {
		if fence := strings.TrimSpace(line); strings.HasPrefix(fence, "```") {
			if !inFence {
				inFence, inGo = true, strings.HasPrefix(fence, "```go")
			} else {
				inFence, inGo = false, false
			}
			continue
		}
		if !inGo {
			lines, nums = append(lines, line), append(nums, i+1)
		}
	}
	return lines, nums
}

// moduleRoot is the folder of the go.mod nearest above dir, or ".".
func moduleRoot(dir string) string {
	for d := dir; d != "." && d != string(filepath.Separator); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return "."
}

// TestCitedPathsExist: every repository path cited in a Go comment (all
// modules) or a Markdown file exists, relative to the repository root, to
// the citing file's module or to its folder (see citedPaths for what a
// path is).
func TestCitedPathsExist(t *testing.T) {
	tops := map[string]bool{}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			tops[e.Name()] = true
		}
	}
	var n int
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir // npm's, not the repository's
			}
			return nil
		}
		ext := filepath.Ext(path)
		if ext != ".go" && ext != ".md" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var lines []string
		var nums []int
		if ext == ".go" {
			lines, nums = goComments(src)
		} else {
			lines, nums = markdownProse(src)
		}
		dir := filepath.Dir(path)
		bases := []string{".", moduleRoot(dir), dir}
		for i, line := range lines {
			for _, w := range splitWords(line) {
				for _, p := range citedPaths(w, tops) {
					n++
					if pathExists(p, bases...) {
						continue
					}
					t.Errorf("%s:%d: %s: no such file or folder", path, nums[i], p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 200 {
		t.Fatalf("found %d cited paths: the scan no longer finds them", n)
	}
	t.Logf("%d cited paths checked", n)
}

func TestCitedPaths(t *testing.T) {
	tops := map[string]bool{"transport": true, "actors": true, "internal": true, "bench": true}
	for _, tt := range []struct {
		word string
		want []string
	}{
		{word: "transport/handlers.go:250", want: []string{"transport/handlers.go"}},
		{word: "runtime.go:705-711,", want: []string{"runtime.go"}},
		{word: "actors/thread", want: []string{"actors/thread"}},
		{word: "internal/liveness.", want: []string{"internal/liveness"}},
		{word: "cluster/", want: []string{"cluster/"}},
		{word: "../../README.md", want: []string{"../../README.md"}},
		{word: "docs/SPEC.md#5-dispatch", want: []string{"docs/SPEC.md"}},
		{word: "**bench/README.md**", want: []string{"bench/README.md"}},
		{word: "bench/cmd/{server,load}", want: []string{"bench/cmd/server", "bench/cmd/load"}},
		{word: "github.com/agenthost/mcpruntime/transport/transporttest", want: []string{"transport/transporttest"}},
		{word: "github.com/hashicorp/go-memdb"},
		{word: "go.etcd.io/etcd/server/v3"},
		{word: "https://modelcontextprotocol.io/spec.md"},
		{word: "/tmp/runtime.json"},
		{word: "/admin/v1/threads"},
		{word: "$XDG_RUNTIME_DIR/mcpruntime/admin-token"},
		{word: "~/.codex/config.toml"},
		{word: "*_test.go"},
		{word: "actors/*"},
		{word: "./..."},
		{word: "cmd/…"},
		{word: "Host/Origin"},
		{word: "thread/<id>"},
		{word: "notifications/"},
		{word: "tools/call"},
		{word: "internal/oauth.Grants", want: []string{"internal/oauth"}},
		{word: "SIGINT/SIGTERM"},
		{word: "mcpruntime.Config"},
	} {
		got := citedPaths(tt.word, tops)
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("citedPaths(%q) = %q, want %q", tt.word, got, tt.want)
		}
	}
	if got, want := splitWords("see `cmd/{server,load}`, (bench/README.md)"), []string{"see", "cmd/{server,load}", "bench/README.md"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("splitWords = %q, want %q", got, want)
	}
}
