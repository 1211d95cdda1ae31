// Command runtime is the standalone session runtime: a sidecar that a host
// written in any language runs and drives over HTTP.
//
//	runtime [serve] [flags]     serve MCP and the admin API (the default)
//	runtime admin <command> …   drive a running server's admin API
//
// `runtime serve` serves the MCP endpoint on --listen (127.0.0.1:7331,
// path /mcp) and the admin API, /healthz and /readyz on --admin-listen
// (127.0.0.1:7332), loopback only unless told otherwise. The admin token
// is $RUNTIME_ADMIN_TOKEN, or one generated at start and written to a 0600
// file whose path is logged (never the token). With --demo (off unless
// asked for; `make run` asks) it also creates a thread "demo" served by an
// in-process provider instance "demo", opens its provider session, starts
// a run and writes that session's Authorization header value to a 0600
// file whose path it logs.
// SIGINT or SIGTERM shuts it down gracefully.
//
// Every setting has one name: the flag --NAME, the environment variable
// RUNTIME_NAME (upper case, "-" as "_") and the key NAME of the optional
// TOML config file (--config, $RUNTIME_CONFIG). A flag beats the
// environment, which beats the file, which beats the default. Invalid
// settings exit with status 2. `runtime --help` lists them all.
//
// With --etcd the server is one node of several sharing that etcd (SPEC
// §5d): it also serves the node-to-node listener (--internal-listen), and
// when it loses its cluster membership (its lease lapsed, or its replica
// stopped) it shuts down and exits with status 3, for its supervisor to
// restart it: it then joins as a new member with a fresh replica. Any
// other failure exits 1.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills at once
	}()
	code := run(ctx, os.Args[1:], environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli is the command line. Settings (tag `config:""`) also come from the
// environment and the config file; see config.go.
type cli struct {
	Config    string `config:"" placeholder:"FILE" help:"TOML config file of settings, keyed by flag name."`
	LogFormat string `config:"" enum:"text,json" default:"text" placeholder:"FORMAT" help:"Log format: text or json."`
	LogLevel  string `config:"" enum:"debug,info,warn,error" default:"info" placeholder:"LEVEL" help:"Log level: debug, info, warn or error."`

	Serve serveCmd `cmd:"" default:"withargs" help:"Serve MCP and the admin API until SIGINT or SIGTERM (the default command)."`
	Admin adminCmd `cmd:"" help:"Drive a running server through its admin API over HTTP."`
}

// deps is what a command's Run receives.
type deps struct {
	ctx    context.Context
	env    map[string]string
	stdout io.Writer
	stderr io.Writer
	logger *slog.Logger
	cli    *cli
	given  map[string]bool // the settings set explicitly: by flag, environment or file
}

// usageError is a bad invocation or configuration: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCode carries kong's exit (after --help) out of its parse.
type exitCode int

// run is the whole program: parse args and settings from env and the
// config file, run the command, return the exit status. ctx ends on
// SIGINT or SIGTERM.
func run(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	var c cli
	kctx, code, err := parse(&c, args, env, stdout, stderr)
	if err != nil || code >= 0 {
		if err != nil {
			fmt.Fprintf(stderr, "runtime: %v\nrun \"runtime --help\" for usage\n", err)
		}
		return max(code, 0)
	}
	logger := newLogger(stderr, c.LogFormat, c.LogLevel)
	d := &deps{ctx: ctx, env: env, stdout: stdout, stderr: stderr, logger: logger, cli: &c, given: givenSettings(kctx)}
	if err := kctx.Run(d, kongCommand(kctx.Command())); err != nil {
		// One line per problem, each saying who speaks.
		fmt.Fprintf(stderr, "runtime: %s\n", strings.ReplaceAll(err.Error(), "\n", "\nruntime: "))
		switch {
		case errors.As(err, new(usageError)):
			return 2
		case errors.Is(err, errLost):
			return exitLost
		}
		return 1
	}
	return 0
}

// givenSettings are the names of the flags set on the command line or by
// the resolver (environment, config file), not by their defaults.
func givenSettings(kctx *kong.Context) map[string]bool {
	given := map[string]bool{}
	for _, p := range kctx.Path {
		if p.Flag != nil {
			given[p.Flag.Name] = true
		}
	}
	return given
}

// parse parses the command line. code is -1 to go on, else the status to
// exit with (0 after --help, 2 on error).
func parse(c *cli, args []string, env map[string]string, stdout, stderr io.Writer) (kctx *kong.Context, code int, err error) {
	res := &settings{env: env}
	parser, err := kong.New(c,
		kong.Name("runtime"),
		kong.Description("The MCP session runtime: serve it, or drive a running one through its admin API.\n\n"+
			"Every setting is a flag --NAME, an environment variable RUNTIME_NAME (upper case, - as _) and a key NAME "+
			"of the TOML config file; a flag beats the environment, which beats the file, which beats the default."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(exitCode(code)) }),
		kong.Resolvers(res),
		kong.WithBeforeResolve(res.load),
		kong.ValueFormatter(helpValue),
		kong.Vars{"default_token_file": defaultTokenFile(env), "default_state_dir": defaultStateDir(env)},
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Help(helpWithServe),
	)
	if err != nil {
		return nil, 1, err // the grammar itself is wrong
	}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(exitCode)
			if !ok {
				panic(r)
			}
			kctx, code, err = nil, int(e), nil
		}
	}()
	kctx, err = parser.Parse(args)
	if err != nil {
		return nil, 2, err
	}
	return kctx, -1, nil
}

// helpWithServe is kong's help, and at the top level (`runtime --help`)
// also the help of serve, the default command, and of admin, so that every
// setting is listed where the README says.
func helpWithServe(options kong.HelpOptions, ctx *kong.Context) error {
	if err := kong.DefaultHelpPrinter(options, ctx); err != nil {
		return err
	}
	if ctx.Selected() != nil {
		return nil
	}
	for _, node := range ctx.Model.Children {
		var title string
		opts := options
		switch node.Name {
		case "serve":
			title = "The default command, serve, and its settings:"
		case "admin":
			title = "The admin command's own settings:"
			opts.NoExpandSubcommands = true
		default:
			continue
		}
		fmt.Fprintf(ctx.Stdout, "\n%s\n\n", title)
		sub := *ctx // a copy whose selected command is node
		sub.Path = append(slices.Clone(ctx.Path), &kong.Path{Parent: ctx.Model.Node, Command: node})
		if err := kong.DefaultHelpPrinter(opts, &sub); err != nil {
			return err
		}
	}
	return nil
}

// newLogger returns the slog logger of the settings (already validated).
func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
