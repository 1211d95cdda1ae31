package mcpruntime_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
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
// "(§3.6)" inside SPEC.md itself.
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
// step n" a step of its table (issue 12: the contract is in the
// repository and every reference resolves).
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
			if name := d.Name(); path != "." && (name == "bench" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir // bench/ is a module of its own, with its own notes
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
