package config

import (
	"fmt"
	"strings"
)

// EnvPrefix starts the name of every jiarun environment variable.
const EnvPrefix = "JIA_"

// contractEnv lists the variables of the launch contract, which jiarun sets
// for each rank (see runtime/contract.go); they are not configuration.
var contractEnv = []string{
	"JIA_RANK", "JIA_SIZE", "JIA_LOCAL_RANK", "JIA_LOCAL_SIZE", "JIA_JOB",
	"JIA_RENDEZVOUS", "JIA_SECRET", "JIA_HOST", "JIA_CONFIG_DATA", "JIA_ADDR",
}

// ApplyEnv overlays c with the environment read through getenv (os.Getenv
// in real use): JIA_<SECTION>_<KEY> in upper case for every key
// (JIA_TRANSPORT_KIND, JIA_COMM_EAGER_LIMIT, JIA_DSM_PREFETCH_PAGES,
// JIA_LOG_LEVEL, JIA_LAUNCH_GRACE_PERIOD, …) and the aliases listed by
// [EnvNames] (JIA_TRANSPORT for JIA_TRANSPORT_KIND). An empty variable counts
// as unset. Values are written as in a file but without quotes: "true",
// "64KiB", "1.5s" (or "30", seconds), "tcp". A variable and its alias set to
// different values is an error.
//
// Errors name the variable ("environment variable JIA_DSM_STATS: invalid
// boolean ..."); all of them are reported, and on error c is unchanged.
func (c *Config) ApplyEnv(getenv func(string) string) error {
	nc := *c
	var errs []*Error
	from := map[*leaf]string{}
	for _, s := range schema() {
		for _, l := range s.fields {
			var val, name string
			for _, n := range append([]string{l.env}, l.aliases...) {
				v := strings.TrimSpace(getenv(n))
				switch {
				case v == "":
				case name == "":
					val, name = v, n
				case v != val:
					errs = append(errs, &Error{Var: n, Key: l.path,
						Msg: fmt.Sprintf("%q conflicts with %s=%q", v, name, val)})
				}
			}
			if name == "" {
				continue
			}
			if err := l.setString(&nc, val); err != nil {
				errs = append(errs, &Error{Var: name, Key: l.path, Msg: err.Error()})
				continue
			}
			from[l] = name
		}
	}
	for _, p := range nc.problems() {
		if name, ok := from[p.leaf]; ok {
			errs = append(errs, &Error{Var: name, Key: p.leaf.path, Msg: p.msg})
		}
	}
	if err := joinErrors(errs); err != nil {
		return err
	}
	*c = nc
	return nil
}

// EnvNames returns the names of the configuration variables, canonical
// names and aliases, in the order of the keys.
func EnvNames() []string {
	var names []string
	for _, s := range schema() {
		for _, l := range s.fields {
			names = append(names, l.env)
			names = append(names, l.aliases...)
		}
	}
	return names
}

// UnknownEnv returns the names of the variables in environ (KEY=VALUE
// strings, as from os.Environ) that start with JIA_ but are neither
// configuration variables nor the launch contract's, in order and without
// repeats: likely typos for the launcher to warn about. [SuggestEnv] offers
// a correction.
func UnknownEnv(environ []string) []string {
	known := map[string]bool{}
	for _, n := range EnvNames() {
		known[n] = true
	}
	for _, n := range contractEnv {
		known[n] = true
	}
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) && !known[name] {
			known[name] = true // report once
			unknown = append(unknown, name)
		}
	}
	return unknown
}

// SuggestEnv returns the configuration variable a misspelt name most likely
// meant, or "" if none is close.
func SuggestEnv(name string) string {
	return nearest(name, EnvNames())
}
