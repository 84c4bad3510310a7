package control

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/underlay-net/underlay/dockerapi"
	"github.com/underlay-net/underlay/doctor"
)

// The commands (fixed: monitoring and scripts call them like this):
//
//	underlay ls     [--socket PATH] [--docker-host unix://PATH] [--json]
//	underlay doctor [--socket PATH] [--docker-host unix://PATH] [--repair] [--json]
//	(underlay doctor --lan is cmd/underlay's lan.go: it needs the driver's option table)

// Exit codes of doctor (docs/operating.md, underlay doctor). A monitor reads only
// ExitHealthy as healthy.
const (
	// ExitHealthy: every check ran and nothing was found (or, with
	// --repair, nothing remains).
	ExitHealthy = 0
	// ExitFindings: findings remain (some checks may have been skipped
	// too: the report says which).
	ExitFindings = 1
	// ExitCannot: doctor could not run (no daemon, bad flags).
	ExitCannot = 2
	// ExitIncomplete: the checks that ran found nothing, but some were
	// skipped (Docker unreachable): health is unknown, not proven.
	ExitIncomplete = 3
)

type options struct {
	socket, dockerHost string
	json, repair       bool
	stdout, stderr     io.Writer
	pluginGlob         string
	// docker is the client of --docker-host, made once; dockerErr says
	// why there is none (a warning when Docker is asked).
	docker    *dockerapi.Client
	dockerErr error
}

// LsFlags is the flag set of `underlay ls`, its defaults read through
// getenv: the one definition the parser and the manual page
// (cmd/underlay's generator) share.
func LsFlags(getenv func(string) string) *flag.FlagSet {
	return newFlags("ls", false, &options{}, getenv)
}

// DoctorFlags is the flag set of `underlay doctor` (without --lan), as
// LsFlags.
func DoctorFlags(getenv func(string) string) *flag.FlagSet {
	return newFlags("doctor", true, &options{}, getenv)
}

// newFlags defines the flags of ls or doctor (repair: doctor's --repair)
// into o.
func newFlags(name string, repair bool, o *options, getenv func(string) string) *flag.FlagSet {
	fs := flag.NewFlagSet("underlay "+name, flag.ContinueOnError)
	fs.StringVar(&o.socket, "socket", "", "the daemon's socket (default "+DefaultSocket+", else the one managed plugin's "+PluginSockets+")")
	def := getenv("DOCKER_HOST")
	if def == "" {
		def = "unix:///var/run/docker.sock"
	}
	fs.StringVar(&o.dockerHost, "docker-host", def, "Docker API for network names and stale checks (env DOCKER_HOST)")
	fs.BoolVar(&o.json, "json", false, "print one JSON document")
	if repair {
		fs.BoolVar(&o.repair, "repair", false, "fix what is safe to fix, printing each action")
	}
	return fs
}

func parse(name string, args []string, repair bool, stdout, stderr io.Writer) (options, error) {
	o := options{stdout: stdout, stderr: stderr, pluginGlob: PluginSockets}
	fs := newFlags(name, repair, &o, os.Getenv)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: underlay %s takes only flags", fs.Arg(0), name)
	}
	if err := CheckDockerHost(o.dockerHost); err != nil {
		return o, err
	}
	o.docker, o.dockerErr = dockerapi.New(o.dockerHost, 5*time.Second)
	return o, nil
}

// RunLs runs `underlay ls` and returns its exit code.
func RunLs(args []string, stdout, stderr io.Writer) int {
	o, err := parse("ls", args, false, stdout, stderr)
	if err != nil {
		return usageCode(err, stderr)
	}
	ctx := context.Background()
	c, err := o.client()
	if err != nil {
		fmt.Fprintln(stderr, "underlay ls:", err)
		return ExitCannot
	}
	st, err := c.State(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "underlay ls:", err)
		return ExitCannot
	}
	dk := o.askDocker(ctx, st)
	doc := listing(st, dk)
	if o.json {
		return writeJSON(stdout, stderr, doc)
	}
	printListing(stdout, doc)
	if dk.err != "" {
		fmt.Fprintln(stderr, "warning: Docker could not be asked, names are missing:", dk.err)
	}
	return 0
}

// RunDoctor runs `underlay doctor` and returns its exit code.
func RunDoctor(args []string, stdout, stderr io.Writer) int {
	o, err := parse("doctor", args, true, stdout, stderr)
	if err != nil {
		return usageCode(err, stderr)
	}
	ctx := context.Background()
	c, err := o.client()
	if err != nil {
		fmt.Fprintln(stderr, "underlay doctor:", err)
		return ExitCannot
	}
	report := Report{Repairs: []RepairResult{}}
	failed := map[string]bool{} // actions refused or failed: not sent again
	// A repair can uncover the next finding (a stale network's pool is
	// unused once the network is gone): check again after a round that
	// made progress, a few rounds at most.
	for round := 0; ; round++ {
		report.Findings, report.Skipped, err = o.check(ctx, c)
		if err != nil {
			fmt.Fprintln(stderr, "underlay doctor:", err)
			return ExitCannot
		}
		if !o.repair || round == 3 {
			break
		}
		progress := false
		for _, f := range report.Findings {
			if f.Action == nil || failed[actionKey(*f.Action)] {
				continue
			}
			r := RepairResult{Kind: f.Kind, Subject: f.Subject, Action: *f.Action}
			if r.Result, err = c.Repair(ctx, *f.Action); err != nil {
				r.Error = err.Error()
				failed[actionKey(*f.Action)] = true
			} else {
				progress = true
			}
			report.Repairs = append(report.Repairs, r)
			if !o.json {
				printRepair(stdout, r)
			}
		}
		if !progress {
			break
		}
	}
	report.Remaining = len(report.Findings)
	report.Complete = len(report.Skipped) == 0
	report.Warnings = make([]string, 0, len(report.Skipped))
	for _, sk := range report.Skipped {
		report.Warnings = append(report.Warnings, sk.String())
	}
	if o.json {
		writeJSON(stdout, stderr, report)
	} else {
		printReport(stdout, stderr, report, o.repair)
	}
	switch {
	case report.Remaining > 0:
		return ExitFindings
	case !report.Complete:
		return ExitIncomplete
	}
	return ExitHealthy
}

// Report is doctor's JSON document.
type Report struct {
	// Findings are what is wrong (after the repairs, with --repair).
	Findings []doctor.Finding `json:"findings"`
	// Warnings are checks that could not run (Docker unreachable), one
	// line each: Skipped as text.
	Warnings []string `json:"warnings"`
	// Skipped are the checks that could not run, each with its reason.
	Skipped []doctor.Skip `json:"skipped"`
	// Complete is false when a check was skipped: no findings then means
	// unknown, not healthy (exit ExitIncomplete).
	Complete bool `json:"complete"`
	// Repairs are the actions --repair took, in order.
	Repairs []RepairResult `json:"repairs"`
	// Remaining is len(Findings): 0 with Complete means healthy (exit 0).
	Remaining int `json:"remaining"`
}

// RepairResult is one repair and what came of it.
type RepairResult struct {
	Kind    string        `json:"kind"`
	Subject string        `json:"subject"`
	Action  doctor.Action `json:"action"`
	Result  string        `json:"result,omitempty"`
	Error   string        `json:"error,omitempty"`
}

func actionKey(a doctor.Action) string {
	return string(a.Op) + " " + a.Network + " " + a.Endpoint + " " + a.Link + " " + a.Pool
}

// check runs the doctor twice, a moment apart, and keeps the findings of
// both: a request between reading the state file and listing the links
// (a record written before its link is made, a link deleted before its
// record) shows a finding once that is no finding.
func (o options) check(ctx context.Context, c *Client) ([]doctor.Finding, []doctor.Skip, error) {
	var first map[string]bool
	var findings []doctor.Finding
	var skipped []doctor.Skip
	for pass := 0; pass < 2; pass++ {
		if pass == 1 {
			time.Sleep(confirmDelay)
		}
		st, err := c.State(ctx)
		if err != nil {
			return nil, nil, err
		}
		dv := o.askDocker(ctx, st)
		in := st.Input(dv.view)
		in.DockerError = dv.err
		findings, skipped = doctor.Check(in)
		if pass == 0 {
			first = map[string]bool{}
			for _, f := range findings {
				first[f.Kind+" "+f.Subject] = true
			}
			if len(findings) == 0 {
				break
			}
		}
	}
	kept := []doctor.Finding{}
	for _, f := range findings {
		if first[f.Kind+" "+f.Subject] {
			kept = append(kept, f)
		}
	}
	if skipped == nil {
		skipped = []doctor.Skip{}
	}
	return kept, skipped, nil
}

// confirmDelay separates the two passes of check.
const confirmDelay = 300 * time.Millisecond

func (o options) client() (*Client, error) {
	socket, err := FindSocket(o.socket, DefaultSocket, o.pluginGlob)
	if err != nil {
		return nil, err
	}
	return NewClient(socket), nil
}

func usageCode(err error, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "underlay:", err)
	return ExitCannot
}

func writeJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(stderr, "underlay:", err)
		return ExitCannot
	}
	return 0
}

// dockerView is what Docker said, for ls (names) and doctor (view).
type dockerView struct {
	names map[string]string
	view  *doctor.Docker
	err   string
}

// askDocker lists Docker's networks once and confirms each network of
// underlay's that the list lacks with Docker's own 404 (the stale rule of
// CreateNetwork).
func (o options) askDocker(ctx context.Context, st State) dockerView {
	if o.dockerErr != nil {
		return dockerView{err: o.dockerErr.Error()}
	}
	api := o.docker
	nets, err := api.Networks(ctx)
	if err != nil {
		return dockerView{err: err.Error()}
	}
	dv := dockerView{names: map[string]string{}, view: &doctor.Docker{Subnets: subnetsOf(nets), Missing: map[string]bool{}, Unsure: map[string]string{}}}
	for _, n := range nets {
		dv.names[n.ID] = n.Name
	}
	for _, n := range st.Networks {
		if _, ok := dv.names[n.ID]; ok {
			continue
		}
		exists, err := api.NetworkExists(ctx, n.ID)
		switch {
		case err != nil:
			dv.view.Unsure[n.ID] = err.Error()
		case !exists:
			dv.view.Missing[n.ID] = true
		}
	}
	return dv
}
