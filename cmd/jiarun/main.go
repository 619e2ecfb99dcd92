// Command jiarun starts a jiarun job: N ranks of one Go SPMD program, with
// message passing and distributed shared memory between them.
//
//	jiarun -np 4 ./app [ARGS...]
//	jiarun -np 8 -f hosts.toml --tag-output ./app
//	jiarun info
//
// This file holds the flags only; everything jiarun does is in package
// launcher.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/jiarun/jia/launcher"
)

const usageText = `jiarun [flags] PROGRAM [ARGS...]
   jiarun info

EXAMPLES:
   jiarun -np 4 ./bin/hello                 4 ranks on this host
   jiarun -np 4 ./apps/hello                build the Go main package, then run it
   jiarun -np 8 -H localhost:8 --tag-output ./app -size 1024
   jiarun -np 16 -f hosts.toml ./app        hosts and slots from a host file
   jiarun -f hosts.toml --fanout 8 ./app    proxies of more than 8 hosts start one another (a tree)
   jiarun -np 2 -x OMP_NUM_THREADS --env GODEBUG=gctrace=1 ./app
   jiarun -np 4 --timeout 10m --config run.toml ./app
   jiarun info                              what this host offers (transports, userfaultfd, cores)`

func main() {
	os.Exit(run(os.Args))
}

func run(args []string) int {
	code := 0
	app := &cli.App{
		Name:                      "jiarun",
		Usage:                     "run a Go SPMD program as N ranks with message passing and distributed shared memory",
		UsageText:                 usageText,
		Version:                   launcher.Version(),
		HideHelpCommand:           true,
		DisableSliceFlagSeparator: true,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "np", Aliases: []string{"n"}, Usage: "number of ranks (default: the slots of the host list, or 1)"},
			&cli.StringFlag{Name: "H", Aliases: []string{"host"}, Usage: "host list `host:slots,...` (a host without :slots has 1)"},
			&cli.StringFlag{Name: "hostfile", Aliases: []string{"f"}, Usage: "host `FILE`: hosts.toml, or MPI style (`host slots=N` lines)"},
			&cli.BoolFlag{Name: "oversubscribe", Usage: "allow more ranks than the host list has slots"},
			&cli.StringFlag{Name: "bind-to", Usage: "bind each rank to a processor: `core` or none (default: core when every processor of a host gets the same number of its ranks)"},
			&cli.StringSliceFlag{Name: "x", Usage: "pass environment variable `VAR` (or VAR=VALUE) to every rank; repeatable"},
			&cli.StringSliceFlag{Name: "env", Usage: "set `K=V` in every rank's environment; repeatable"},
			&cli.StringFlag{Name: "wdir", Usage: "working `DIR` of the ranks"},
			&cli.BoolFlag{Name: "tag-output", Usage: "prefix every line of output with [rank]"},
			&cli.DurationFlag{Name: "timeout", Usage: "stop the job after `DURATION` (exit code 124)"},
			&cli.StringFlag{Name: "transport", Usage: "transport between ranks: auto, shm, tcp or verbs"},
			&cli.StringFlag{Name: "stdin", Value: "0", Usage: "rank that reads jiarun's standard input, or none"},
			&cli.StringFlag{Name: "config", Usage: "configuration `FILE` (default: jia.toml in the working directory, if present)"},
			&cli.StringFlag{Name: "log-level", Usage: "log level of jiarun and the ranks: debug, info, warn or error"},
			&cli.StringFlag{Name: "ssh-config", Usage: "ssh_config `FILE` for the other hosts (default ~/.ssh/config)"},
			&cli.StringFlag{Name: "ssh-key", Usage: "private key `FILE` for SSH (after ssh-agent's keys)"},
			&cli.BoolFlag{Name: "ssh-accept-new", Usage: "add unknown host keys to known_hosts (a changed key is still refused)"},
			&cli.DurationFlag{Name: "ssh-timeout", Usage: "time allowed to connect and log in to each host (default 10s)"},
			&cli.DurationFlag{Name: "host-timeout", Usage: "stop the job when another host is silent this long (default 4s)"},
			&cli.IntFlag{Name: "fanout", EnvVars: []string{"JIARUN_FANOUT"}, Value: launcher.DefaultFanout,
				Usage: "with more other hosts than `N`, proxies start further proxies (a tree, log-time start-up); 0: jiarun starts every proxy itself"},
			&cli.BoolFlag{Name: "no-stage", Usage: "do not copy jiarun and the program to the other hosts (they share the file system)"},
			&cli.StringFlag{Name: "launch-agent", Usage: "command that starts jiarun's proxy on another host, called as `AGENT` HOST jiarun proxy (e.g. \"ssh -x\")"},
		},
		Commands: []*cli.Command{{
			Name:  "info",
			Usage: "show what this host offers: transports, userfaultfd, cores, Go",
			Action: func(c *cli.Context) error {
				return launcher.Info(c.App.Writer)
			},
		}, {
			Name:   "proxy",
			Usage:  "the host side of a multi-host launch (started by jiarun itself)",
			Hidden: true,
			Action: func(*cli.Context) error {
				code = launcher.RunProxy(os.Stdin, os.Stdout, os.Stderr)
				return nil
			},
		}},
		Action: func(c *cli.Context) error {
			var err error
			code, err = launch(c)
			return err
		},
		OnUsageError:   func(_ *cli.Context, err error, _ bool) error { return err },
		ExitErrHandler: func(*cli.Context, error) {},
	}
	if err := app.Run(args); err != nil {
		fmt.Fprintf(os.Stderr, "jiarun: %v\n", err)
		if code == 0 {
			code = launcher.ExitUsage
		}
	}
	return code
}

func launch(c *cli.Context) (int, error) {
	if c.NArg() == 0 {
		return launcher.ExitUsage, &launcher.UsageError{Err: errors.New("no PROGRAM given (usage: jiarun [flags] PROGRAM [ARGS...]; jiarun --help for more)")}
	}
	opts := launcher.Options{
		NP:            c.Int("np"),
		NPSet:         c.IsSet("np"),
		HostSpec:      c.String("H"),
		Hostfile:      c.String("hostfile"),
		Oversubscribe: c.Bool("oversubscribe"),
		BindTo:        c.String("bind-to"),
		ExportVars:    c.StringSlice("x"),
		SetVars:       c.StringSlice("env"),
		WorkDir:       c.String("wdir"),
		TagOutput:     c.Bool("tag-output"),
		Timeout:       c.Duration("timeout"),
		TimeoutSet:    c.IsSet("timeout"),
		Transport:     c.String("transport"),
		Stdin:         c.String("stdin"),
		ConfigFile:    c.String("config"),
		LogLevel:      c.String("log-level"),
		LaunchAgent:   c.String("launch-agent"),
		NoStage:       c.Bool("no-stage"),
		SSHConfig:     c.String("ssh-config"),
		SSHKey:        c.String("ssh-key"),
		SSHAcceptNew:  c.Bool("ssh-accept-new"),
		SSHTimeout:    c.Duration("ssh-timeout"),
		HostTimeout:   c.Duration("host-timeout"),
		Fanout:        c.Int("fanout"),
		FanoutSet:     c.IsSet("fanout"),
		Program:       c.Args().First(),
		Args:          c.Args().Tail(),
	}
	job, err := launcher.Prepare(opts, os.Getenv)
	if err != nil {
		return launcher.ExitUsage, err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	job.Stdin, job.Stdout, job.Stderr, job.Signals = os.Stdin, os.Stdout, os.Stderr, sigs
	return launcher.Run(context.Background(), job)
}
