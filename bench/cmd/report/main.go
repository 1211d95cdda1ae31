// Command report reads the JSON result lines of cmd/load (files named on
// the command line, or stdin) and prints one Markdown table: per mode,
// concurrency, number of tokens and tool, the median over rounds of each
// metric for every server, each variant's ratio to the runtime, and the
// runtime's (and the shipped binary's) ratio to each peer and to the
// floor. A line before the table says which tool the rows call.
//
//	report results.jsonl
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/agenthost/mcpruntime/bench/internal/result"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(files []string, stdin io.Reader, out io.Writer) error {
	var all []result.Result
	if len(files) == 0 {
		rs, err := result.Read(stdin)
		if err != nil {
			return err
		}
		all = rs
	}
	for _, name := range files {
		rs, err := readFile(name)
		if err != nil {
			return err
		}
		all = append(all, rs...)
	}
	if len(all) == 0 {
		return fmt.Errorf("no results")
	}
	if _, err := fmt.Fprintf(out, "%s\n\n", toolNote(all)); err != nil {
		return err
	}
	return render(out, buildTable(all))
}

func readFile(name string) ([]result.Result, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rs, err := result.Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return rs, nil
}
