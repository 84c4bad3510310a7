package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var updateMan = flag.Bool("update-man", false, "write man/*.8 and completion/underlay.bash from the commands' flags")

// The generated files, relative to the repository's root.
const completionFile = "completion/underlay.bash"

// bugs is every page's BUGS section.
const bugs = "Report bugs to <maintainers@underlay.dev> or https://github.com/underlay-net/underlay/issues"

// envRe finds the environment variable a flag's usage names: "(env STATE)",
// "(repeatable; env DEFAULT_ADDRESS_POOLS, ...)".
var envRe = regexp.MustCompile(`\benv ([A-Z][A-Z0-9_]*)`)

// roff escapes text for a roff text line: backslashes, hyphens (\-, the
// minus sign commands and flags are typed with) and a leading control
// character (. or ').
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// bold and italic are roff font changes around escaped text.
func bold(s string) string   { return `\fB` + roff(s) + `\fR` }
func italic(s string) string { return `\fI` + roff(s) + `\fR` }

// roffSynopsis is a command line in roff: the command bold, flags bold,
// placeholders italic, no break inside one bracketed flag.
func roffSynopsis(c command) string {
	var b strings.Builder
	words := synopsisWords(c)
	n := 1 + len(strings.Fields(c.name))
	head := strings.Join(words[:n], " ")
	cmd, value, _ := strings.Cut(head, " --lan ")
	if value != "" {
		b.WriteString(".SY \"" + roff(cmd) + "\"\n" + bold("--lan") + `\ ` + italic(value) + "\n")
	} else {
		b.WriteString(".SY \"" + roff(head) + "\"\n")
	}
	for _, w := range words[n:] {
		open, end := "", ""
		if strings.HasPrefix(w, "[") {
			open = "["
			w = strings.TrimPrefix(w, "[")
		}
		if i := strings.LastIndex(w, "]"); i >= 0 {
			end, w = w[i:], w[:i]
		} else if strings.HasSuffix(w, "...") {
			end, w = "...", strings.TrimSuffix(w, "...")
		}
		fl, val, _ := strings.Cut(w, " ")
		switch {
		case !strings.HasPrefix(fl, "-"):
			b.WriteString(roff(open) + italic(fl) + roff(end) + "\n")
		case val != "":
			b.WriteString(roff(open) + bold(fl) + `\ ` + italic(val) + roff(end) + "\n")
		default:
			b.WriteString(roff(open) + bold(fl) + roff(end) + "\n")
		}
	}
	b.WriteString(".YS\n")
	return b.String()
}

// manPages renders every manual page, by file name ("underlay-serve.8").
func manPages() map[string]string {
	pages := map[string][]command{}
	var order []string
	for _, c := range commands() {
		if _, ok := pages[c.page]; !ok {
			order = append(order, c.page)
		}
		pages[c.page] = append(pages[c.page], c)
	}
	out := map[string]string{}
	for _, page := range order {
		if page == "underlay" {
			out[page+".8"] = mainPage(pages[page], order)
			continue
		}
		out[page+".8"] = subPage(page, pages[page], order)
	}
	return out
}

func header(b *strings.Builder, page, summary string) {
	fmt.Fprintf(b, ".\\\" Generated from the flags of underlay by: go test ./cmd/underlay -run TestManPages -update-man\n")
	fmt.Fprintf(b, ".\\\" Do not edit: change the flags or cmd/underlay/commands.go and regenerate.\n")
	fmt.Fprintf(b, ".TH %s 8 \"\" \"underlay\" \"System Administration\"\n", roff(strings.ToUpper(page)))
	fmt.Fprintf(b, ".SH NAME\n%s \\- %s\n", roff(page), roff(summary))
}

func footer(b *strings.Builder, files []string, self string, order []string) {
	if len(files) > 0 {
		b.WriteString(".SH FILES\n")
		for _, f := range files {
			b.WriteString(".TP\n" + italic(f) + "\n" + roff(fileDoc[f]) + "\n")
		}
	}
	// \% keeps the address from being hyphenated.
	text, url, _ := strings.Cut(bugs, " https://")
	b.WriteString(".SH BUGS\n" + roff(text) + "\n.br\n\\%" + roff("https://"+url) + "\n")
	b.WriteString(".SH SEE ALSO\n")
	var refs []string
	if self != "underlay" {
		refs = append(refs, ".BR underlay (8)")
	}
	for _, p := range order {
		if p != self && p != "underlay" {
			refs = append(refs, ".BR "+roff(p)+" (8)")
		}
	}
	refs = append(refs, ".BR docker (1)")
	b.WriteString(strings.Join(refs, " ,\n") + "\n")
}

// fileDoc says what each default file is.
var fileDoc = map[string]string{
	"/run/docker/plugins/underlay.sock": "The daemon's unix socket: Docker's plugin API, and the state ls and doctor read.",
	stateFile:                           "The daemon's state: the networks, pools and endpoints it made. Keep it until every underlay network is removed.",
}

func subPage(page string, cmds []command, order []string) string {
	var b strings.Builder
	header(&b, page, cmds[0].summary)
	b.WriteString(".SH SYNOPSIS\n.nh\n.na\n")
	for _, c := range cmds {
		b.WriteString(roffSynopsis(c))
	}
	b.WriteString(".ad\n.hy\n")
	b.WriteString(".SH DESCRIPTION\n")
	for i, c := range cmds {
		for _, p := range c.description {
			if i > 0 || p != c.description[0] {
				b.WriteString(".PP\n")
			}
			b.WriteString(roff(p) + "\n")
		}
	}
	b.WriteString(".SH OPTIONS\n")
	env := map[string][]string{}
	for _, c := range cmds {
		if len(cmds) > 1 {
			b.WriteString(".SS " + roff(strings.Join(strings.Fields("underlay "+c.name), " ")) + "\n")
		}
		fs := c.flags(noEnv)
		for _, name := range flagNames(fs, c.args) {
			f := fs.Lookup(name)
			b.WriteString(".TP\n" + bold(dashes(name)))
			if !isBool(f) {
				b.WriteString(" " + italic(valueName(f, c.args[name])))
			}
			b.WriteString("\n" + roff(f.Usage))
			switch f.DefValue {
			case "", "false", "0":
			default:
				b.WriteString(". Default: " + bold(f.DefValue))
			}
			b.WriteString(".\n")
			for _, m := range envRe.FindAllStringSubmatch(f.Usage, -1) {
				env[m[1]] = appendNew(env[m[1]], dashes(name))
			}
		}
	}
	if len(env) > 0 {
		b.WriteString(".SH ENVIRONMENT\n")
		for _, k := range sortedKeys(env) {
			b.WriteString(".TP\n" + bold(k) + "\n" + roff("The default of "+strings.Join(env[k], " and ")+"; the flag wins.") + "\n")
		}
	}
	b.WriteString(".SH EXIT STATUS\n")
	var files []string
	for _, c := range cmds {
		if len(cmds) > 1 {
			b.WriteString(".SS " + roff("underlay "+c.name) + "\n")
		}
		for _, e := range c.exits {
			fmt.Fprintf(&b, ".TP\n.B %d\n%s\n", e.code, roff(upper(e.when)+"."))
		}
		for _, f := range c.files {
			files = appendNew(files, f)
		}
	}
	footer(&b, files, page, order)
	return b.String()
}

func mainPage(own []command, order []string) string {
	var b strings.Builder
	header(&b, "underlay", "Docker network plugin for macvlan and ipvlan networks")
	b.WriteString(".SH SYNOPSIS\n.nh\n.na\n.SY underlay\n" + italic("COMMAND") + "\n[" + italic("FLAG") + "]...\n.YS\n")
	for _, c := range own {
		b.WriteString(roffSynopsis(c))
	}
	b.WriteString(".SY \"underlay help\"\n.YS\n.ad\n.hy\n")
	b.WriteString(".SH DESCRIPTION\n" + roff("underlay is a Docker network plugin that gives containers macvlan and ipvlan interfaces on the host's network, or on a VLAN of it, with an IPAM whose subnets never collide with the host's routes. It runs as a daemon (underlay serve), as a managed plugin or as the systemd unit underlay.service; its other commands ask the daemon or the host.") + "\n")
	b.WriteString(".PP\n" + roff("Flags are written --flag VALUE or --flag=VALUE; -flag works too. COMMAND -h prints a command's flags.") + "\n")
	b.WriteString(".SH COMMANDS\n")
	var files []string
	for _, c := range commands() {
		b.WriteString(".TP\n" + bold("underlay "+c.name) + "\n" + roff(upper(c.summary)+"."))
		if c.page != "underlay" {
			b.WriteString(" See\n.BR " + roff(c.page) + " (8).\n")
		} else {
			b.WriteString("\n")
		}
		for _, f := range c.files {
			files = appendNew(files, f)
		}
	}
	b.WriteString(".TP\n" + bold("underlay help") + "\n" + roff("Print the usage of every command.") + "\n")
	b.WriteString(".SH ENVIRONMENT\n" + roff("Each command's page lists the environment variables its flags default to.") + "\n")
	b.WriteString(".SH EXIT STATUS\n")
	for _, c := range own {
		for _, e := range c.exits {
			fmt.Fprintf(&b, ".TP\n.B %d\n%s\n", e.code, roff(upper(c.name+": "+e.when)+"."))
		}
	}
	b.WriteString(".TP\n.B 2\n" + roff("No command, or an unknown one, was given.") + "\n")
	b.WriteString(".PP\n" + roff("Every other command exits as its page says.") + "\n")
	footer(&b, files, "underlay", order)
	return b.String()
}

func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// completion renders the bash completion of every command.
func completion() string {
	var b strings.Builder
	b.WriteString(`# bash completion for underlay(8).
# Generated from the flags of underlay by: go test ./cmd/underlay -run TestManPages -update-man
# Do not edit: change the flags or cmd/underlay/commands.go and regenerate.

_underlay() {
	local cur prev cmd i w lan=
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=
	if ((COMP_CWORD > 0)); then prev=${COMP_WORDS[COMP_CWORD - 1]}; fi
	# --flag=VALUE: bash splits at '=' (COMP_WORDBREAKS).
	if [[ $cur == = ]]; then
		cur=
	elif [[ $prev == = ]] && ((COMP_CWORD > 1)); then
		prev=${COMP_WORDS[COMP_CWORD - 2]}
	fi
	cmd=
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		if [[ -z $cmd && $w != -* ]]; then cmd=$w; fi
		if [[ $cmd == doctor && ($w == --lan || $w == -lan) ]]; then lan=1; fi
	done
	COMPREPLY=()
	case $cmd:$lan in
	:)
		mapfile -t COMPREPLY < <(compgen -W '`)
	var names []string
	for _, c := range commands() {
		names = appendNew(names, strings.Fields(c.name)[0])
	}
	names = append(names, "help")
	b.WriteString(strings.Join(names, " ") + `' -- "$cur")
		return
		;;
`)
	for _, c := range commands() {
		if c.flags == nil {
			continue
		}
		pattern := c.name
		switch c.name {
		case "doctor":
			pattern = `doctor:`
		case "doctor --lan":
			pattern = `doctor:1`
		default:
			pattern += ":*"
		}
		fs := c.flags(noEnv)
		names := flagNames(fs, c.args)
		fmt.Fprintf(&b, "\t%s)\n\t\tcase $prev in\n", pattern)
		byKind := map[string][]string{}
		var kinds []string
		for _, name := range names {
			if isBool(fs.Lookup(name)) {
				continue
			}
			a := c.args[name]
			kind := "none"
			switch {
			case len(a.values) > 0:
				kind = "values " + strings.Join(a.values, " ")
			case a.complete != "":
				kind = a.complete
			}
			if _, ok := byKind[kind]; !ok {
				kinds = append(kinds, kind)
			}
			byKind[kind] = append(byKind[kind], "-"+name, "--"+name)
		}
		for _, kind := range kinds {
			fmt.Fprintf(&b, "\t\t%s)\n", strings.Join(byKind[kind], " | "))
			switch {
			case kind == "file":
				b.WriteString("\t\t\tcompopt -o filenames 2>/dev/null\n\t\t\tmapfile -t COMPREPLY < <(compgen -f -- \"$cur\")\n")
			case kind == "link":
				b.WriteString("\t\t\tmapfile -t COMPREPLY < <(compgen -W \"$(ls /sys/class/net 2>/dev/null)\" -- \"$cur\")\n")
			case strings.HasPrefix(kind, "values "):
				fmt.Fprintf(&b, "\t\t\tmapfile -t COMPREPLY < <(compgen -W '%s' -- \"$cur\")\n", strings.TrimPrefix(kind, "values "))
			}
			b.WriteString("\t\t\treturn\n\t\t\t;;\n")
		}
		b.WriteString("\t\tesac\n")
		var flags []string
		for _, name := range names {
			flags = append(flags, dashes(name))
		}
		if c.name == "doctor" {
			flags = append(flags, "--lan")
		}
		fmt.Fprintf(&b, "\t\tmapfile -t COMPREPLY < <(compgen -W '%s' -- \"$cur\")\n\t\t;;\n", strings.Join(flags, " "))
	}
	b.WriteString("\tesac\n}\ncomplete -F _underlay underlay\n")
	return b.String()
}

// The manual pages and the completion in the tree are what the commands'
// flags give; -update-man writes them.
func TestManPages(t *testing.T) {
	root := filepath.Join("..", "..")
	want := manPages()
	want[completionFile] = completion()
	var stale []string
	for name, text := range want {
		path := filepath.Join(root, name)
		if !strings.Contains(name, "/") {
			path = filepath.Join(root, "man", name)
		}
		if *updateMan {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != text {
			stale = append(stale, path)
		}
	}
	if len(stale) > 0 {
		sort.Strings(stale)
		t.Fatalf("%s differ from the commands' flags: run go test ./cmd/underlay -run TestManPages -update-man", strings.Join(stale, ", "))
	}
	entries, err := os.ReadDir(filepath.Join(root, "man"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := want[e.Name()]; !ok {
			t.Errorf("man/%s is no generated page: remove it", e.Name())
		}
	}
}

// Each page is roff groff formats without a warning (when groff is here).
func TestManPagesFormat(t *testing.T) {
	if _, err := exec.LookPath("groff"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no groff: in CI test/deps.sh installs it (lintian brings man-db and groff-base)")
		}
		t.Skip("no groff (groff-base): the pages' format is checked where it is installed, and always in CI")
	}
	for name, text := range manPages() {
		cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z")
		cmd.Stdin = strings.NewReader(text)
		out, err := cmd.CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("groff -man -ww %s: %v: %s", name, err, out)
		}
	}
	page := manPages()["underlay-serve.8"]
	for _, want := range []string{`\fB\-\-resolv\-conf\fR \fIPATH\fR`, `\fBCONTAINER_REPAIR_WAIT\fR`, "Default: \\fB/var/lib/underlay/underlay.db\\fR", `\fI/var/lib/underlay/underlay.db\fR`, `.B 2`} {
		if !strings.Contains(page, want) {
			t.Errorf("underlay-serve.8 lacks %q", want)
		}
	}
	if got := roff(".x 'y -z \\"); got != `\&.x 'y \-z \e` {
		t.Errorf("roff escapes %q", got)
	}
}

// Every flag a command's parser reads from the environment names that
// variable in its usage (the ENVIRONMENT sections), and no other.
func TestFlagEnvironmentDocumented(t *testing.T) {
	for _, c := range commands() {
		if c.flags == nil {
			continue
		}
		asked := map[string]bool{}
		fs := c.flags(func(k string) string { asked[k] = true; return "" })
		documented := map[string]bool{}
		fs.VisitAll(func(f *flag.Flag) {
			for _, m := range envRe.FindAllStringSubmatch(f.Usage, -1) {
				documented[m[1]] = true
			}
		})
		if fmt.Sprint(asked) != fmt.Sprint(documented) {
			t.Errorf("underlay %s reads %v from the environment, its flags' usage names %v", c.name, asked, documented)
		}
	}
}

// Every flag that takes a value is described (its placeholder), and every
// description is of a flag: a new flag cannot go undocumented.
func TestFlagArgsDescribed(t *testing.T) {
	for _, c := range commands() {
		if c.flags == nil {
			continue
		}
		fs := c.flags(noEnv)
		fs.VisitAll(func(f *flag.Flag) {
			if _, ok := c.args[f.Name]; !ok && !isBool(f) {
				t.Errorf("underlay %s %s takes a value but has no entry in its command's args (commands.go)", c.name, dashes(f.Name))
			}
		})
		for name := range c.args {
			if fs.Lookup(name) == nil {
				t.Errorf("underlay %s has no flag %s, but commands.go describes it", c.name, dashes(name))
			}
		}
	}
	// The fixed flags of each command line are in the usage.
	u := usageText()
	for _, want := range []string{"--resolv-conf PATH", "--profile DIR", "--sandbox-dir DIR", "--container-repair-wait DURATION", "[--default-address-pool base=CIDR,size=N]...",
		"underlay doctor --lan PARENT", "[-o KEY=VALUE]...", "underlay mac --parent PARENT [--vlan N] NAME", "[--repair]", "underlay version"} {
		if !strings.Contains(u, want) {
			t.Errorf("usage lacks %q:\n%s", want, u)
		}
	}
}

// The completion, run by bash, completes commands, flags and values.
func TestCompletionBehaviour(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no bash")
		}
		t.Skip("no bash")
	}
	file := filepath.Join(t.TempDir(), "underlay.bash")
	if err := os.WriteFile(file, []byte(completion()), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "state.db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words string
		want  string
	}{
		{"underlay se", "serve"},
		{"underlay ''", "serve ls doctor mac version help"},
		{"underlay serve --log-level ''", "debug info warn error"},
		{"underlay serve --log-level = w", "warn"},
		{"underlay serve --sco", "--scope"},
		{"underlay serve --scope g", "global"},
		{"underlay serve --state " + dir + "/st", dir + "/state.db"},
		{"underlay doctor --re", "--repair"},
		{"underlay doctor --la", "--lan"},
		{"underlay doctor --lan lo --ti", "--timeout"},
		{"underlay doctor --lan lo --rep", ""},
		{"underlay ls --", "--docker-host --json --socket"},
		{"underlay mac --parent lo --v", "--vlan"},
		{"underlay version ''", ""},
	} {
		script := fmt.Sprintf("source %s; COMP_WORDS=(%s); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _underlay; echo \"${COMPREPLY[*]}\"", file, tc.words)
		out, err := exec.Command(bash, "--norc", "-c", script).CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != tc.want {
			t.Errorf("completing %s: %q (%v), want %q", tc.words, got, err, tc.want)
		}
	}
	if !bytes.Contains([]byte(completion()), []byte("complete -F _underlay underlay")) {
		t.Error("the completion does not register _underlay")
	}
}
