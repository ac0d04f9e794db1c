package e2e

import (
	"debug/elf"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
)

// TestInstallFromCleanClone installs idem with 'go install .' from a fresh
// git clone of this repository's committed tree (what 'go install
// github.com/idemhq/idem@latest' builds once published), and checks
// --version: the VCS revision from the build info, and a link-time -X
// version that overrides the module version.
func TestInstallFromCleanClone(t *testing.T) {
	busy(t)
	if testing.Short() {
		t.Skip("builds idem twice; skipped with -short")
	}
	root := needGitCheckout(t)
	git, goTool := needTool(t, "git"), needTool(t, "go")
	head := strings.TrimSpace(runIn(t, root, nil, git, "rev-parse", "HEAD"))
	clone := filepath.Join(t.TempDir(), "idem")
	runIn(t, root, nil, git, "clone", "--quiet", "--no-hardlinks", ".", clone)

	// the module path is the one 'go install <module>@latest' asks for, and
	// the main package is the module's root
	if got := strings.TrimSpace(runIn(t, clone, nil, goTool, "list", "-f", "{{.ImportPath}} {{.Name}}", ".")); got != "github.com/idemhq/idem main" {
		t.Fatalf("go list . = %q, want the main package at the module root", got)
	}

	bin := t.TempDir()
	env := []string{"GOBIN=" + bin, "GOFLAGS=-buildvcs=true"}
	runIn(t, clone, env, goTool, "install", ".")
	out := runIn(t, clone, nil, filepath.Join(bin, "idem"), "--version")
	// "idem version v0.0.0-<date>-<rev12>": the pseudo-version Go derives
	// from HEAD (a tagged commit gives its tag and "(<rev12>)")
	want := regexp.MustCompile(`^idem version (v0\.0\.0-\d{14}-` + head[:12] + `|v\S+ \(` + head[:12] + `\))\n$`)
	if !want.MatchString(out) {
		t.Fatalf("--version of a VCS build = %q, want %s", out, want)
	}
	if testing.Verbose() {
		t.Logf("go install . gives: %s", out)
	}

	// -ldflags -X overrides the version; the revision stays
	runIn(t, clone, env, goTool, "build", "-o", filepath.Join(bin, "idem-x"),
		"-ldflags", "-X github.com/idemhq/idem/cmd.version=v9.8.7", ".")
	out = runIn(t, clone, nil, filepath.Join(bin, "idem-x"), "--version")
	if want := "idem version v9.8.7 (" + head[:12] + ")\n"; out != want {
		t.Fatalf("--version with -X = %q, want %q", out, want)
	}
}

// runIn runs name args... in dir with the test's environment plus env,
// fails the test unless it exits 0, and returns its stdout.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	c := inherit(env, name, args...)
	c.dir, c.timeout = dir, 10*time.Minute
	return output(t, c)
}

// installBlock marks a code block of the README's Install section that
// TestREADMEInstall runs: <!-- install: NAME --> right before the fence.
var installBlock = regexp.MustCompile("(?m)^<!-- install: ([a-z-]+) -->\n```sh\n((?s:.*?))```\n")

// installBlocks returns the README's Install section (from "## Install"
// to the next "## ") and its marked blocks by name.
func installBlocks(t *testing.T) (section string, blocks map[string]string) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(moduleRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "\n## Install\n")
	if start < 0 {
		t.Fatal("README has no '## Install' section")
	}
	section = text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	blocks = map[string]string{}
	for _, m := range installBlock.FindAllStringSubmatch(section, -1) {
		blocks[m[1]] = m[2]
	}
	for _, name := range []string{"archive", "package", "image", "go-install", "clone"} {
		if blocks[name] == "" {
			t.Fatalf("the Install section has no block marked <!-- install: %s -->", name)
		}
	}
	return section, blocks
}

// release is scripts/release's output the install tests use: the
// directory CI's release step names (IDEM_TEST_RELEASE_DIR, with
// IDEM_TEST_RELEASE_VERSION), else a linux/amd64 release (and the image,
// when podman is there) built here from a fresh clone of HEAD.
type release struct {
	dir, version, commit string
}

// releaseVersion is the version the tests' own release builds carry.
const releaseVersion = "0.0.0"

// buildRelease returns the release the install tests use; see release.
func buildRelease(t *testing.T) release {
	t.Helper()
	root := needGitCheckout(t)
	git := needTool(t, "git")
	head := strings.TrimSpace(runIn(t, root, nil, git, "rev-parse", "HEAD"))
	if dir := os.Getenv("IDEM_TEST_RELEASE_DIR"); dir != "" {
		v := os.Getenv("IDEM_TEST_RELEASE_VERSION")
		if v == "" {
			t.Fatal("IDEM_TEST_RELEASE_DIR is set, IDEM_TEST_RELEASE_VERSION is not")
		}
		return release{dir: dir, version: v, commit: head}
	}
	for _, tool := range []string{"go", "tar", "gzip", "sha256sum"} {
		needTool(t, tool)
	}
	clone := filepath.Join(t.TempDir(), "idem")
	runIn(t, root, nil, git, "clone", "--quiet", "--no-hardlinks", ".", clone)
	dir := t.TempDir()
	runIn(t, clone, nil, filepath.Join(clone, "scripts", "release"), "--targets", "linux/amd64", releaseVersion, dir)
	return release{dir: dir, version: releaseVersion, commit: head}
}

// wantVersion is what a release's idem --version prints.
func (r release) wantVersion() string {
	return "idem version v" + r.version + " (" + r.commit[:12] + ")\n"
}

// fill puts the release's version where a README block says VERSION.
func (r release) fill(block string) string {
	return strings.ReplaceAll(block, "VERSION", r.version)
}

// sudoShim returns a directory with a sudo that runs its arguments: the
// tests run as root, where the README's sudo changes nothing, and this
// machine has no sudo.
func sudoShim(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sudo"), []byte("#!/bin/sh\nexec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// needRoot: the install blocks write where root may (/usr/local/bin, the
// package database).
func needRoot(t *testing.T) {
	t.Helper()
	testenv.Need(t, "root", os.Geteuid() == 0, "the README's install blocks install system-wide; run the tests as root")
}

// isStatic reports whether the ELF file at path asks for no dynamic
// loader (a CGO_ENABLED=0 build).
func isStatic(t *testing.T, path string) bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// basePath is a PATH with go and the system's programs but no idem (the
// test binary's testscript directory is left out), so that the blocks'
// idem --version finds the idem they installed.
func basePath(t *testing.T, dirs ...string) string {
	t.Helper()
	goTool := needTool(t, "go")
	return "PATH=" + strings.Join(append(dirs, filepath.Dir(goTool), "/usr/local/sbin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"), ":")
}

// TestREADMEInstall runs the README's install blocks as they are written
// (VERSION replaced by the release's version), where this machine can:
// the archive block against a release archive, with a private mount on
// /usr/local/bin; the package block's apt-get line against the .deb
// (installed system-wide, so only with IDEM_TEST_SYSTEM_INSTALL=1, and
// removed after); the image block's arguments against the binary extracted
// from the image (podman run is refused here); go install through a
// GOPROXY=file:// proxy serving the committed tree; the from-clone block
// on a fresh clone. The Go version it asks for is the one go.mod states.
func TestREADMEInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release and installs idem; skipped with -short")
	}
	root := moduleRoot(t)
	section, blocks := installBlocks(t)
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	if want := "Go " + string(m[1]) + " or later"; !strings.Contains(section, want) {
		t.Errorf("the Install section does not say %q (go.mod's go line)", want)
	}
	// a module version is installed only in the go-install block, which
	// says the module is not published yet
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(readme), "\n") {
		if strings.Contains(l, "go install ") && strings.Contains(l, "@") && !strings.Contains(blocks["go-install"], l) {
			t.Errorf("README.md:%d: installs a module version outside the go-install block: %s", i+1, l)
		}
	}
	before := strings.TrimRight(section[:strings.Index(section, "<!-- install: go-install -->")], "\n")
	if intro := strings.Join(strings.Fields(before[strings.LastIndex(before, "\n\n")+1:]), " "); !strings.Contains(intro, "once the module is published") {
		t.Errorf("the go-install block's introduction does not say it works once the module is published: %q", intro)
	}
	if !strings.Contains(blocks["clone"], "CGO_ENABLED=0 go install . ./cmd/idem-net\n") {
		t.Error("the from-clone block does not run 'CGO_ENABLED=0 go install . ./cmd/idem-net'")
	}
	for _, name := range []string{"go-install", "clone"} {
		install := strings.Index(blocks[name], "go install ")
		path := strings.Index(blocks[name], `export PATH="$(go env GOPATH)/bin:$PATH"`)
		version := strings.Index(blocks[name], "idem --version")
		if install < 0 || path < install || version < path {
			t.Errorf("the %s block does not install, put GOPATH's bin on PATH, then run idem --version, in that order", name)
		}
	}

	// one release for the subtests, in the parent's temporary directory
	r := buildRelease(t)

	t.Run("archive", func(t *testing.T) {
		needRoot(t)
		unshare := needTool(t, "unshare")
		// the block runs where a user downloaded SHA256SUMS and one archive
		dir := t.TempDir()
		archive := r.fill("idem_VERSION_linux_amd64.tar.gz")
		for _, f := range []string{"SHA256SUMS", archive} {
			b, err := os.ReadFile(filepath.Join(r.dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// /usr/local/bin is a private tmpfs: the block installs there as
		// written, and nothing of it stays on the machine
		script := "mount -t tmpfs tmpfs /usr/local/bin\n" + r.fill(blocks["archive"]) + "test -x /usr/local/bin/idem\n" +
			"test \"$(/usr/local/bin/idem-net --version)\" = \"$(idem --version)\"\n"
		c := clean([]string{basePath(t, sudoShim(t), "/usr/local/bin")}, unshare, "--mount", "--propagation", "private", "/bin/bash", "-euc", script)
		c.dir = dir
		out := output(t, c)
		if !strings.HasSuffix(out, r.wantVersion()) {
			t.Fatalf("the archive block printed %q, want it to end with %q", out, r.wantVersion())
		}
		if !strings.Contains(out, archive+": OK") {
			t.Fatalf("sha256sum did not check %s: %q", archive, out)
		}
	})

	t.Run("package", func(t *testing.T) {
		// every package the block names is one the release builds
		for _, f := range regexp.MustCompile(`\./(\S+)`).FindAllStringSubmatch(r.fill(blocks["package"]), -1) {
			if _, err := os.Stat(filepath.Join(r.dir, f[1])); err != nil {
				t.Errorf("the package block names %s, which the release did not build: %v", f[1], err)
			}
		}
		if os.Getenv("IDEM_TEST_SYSTEM_INSTALL") != "1" {
			t.Skip("installs the .deb system-wide: set IDEM_TEST_SYSTEM_INSTALL=1 (CI's release step does)")
		}
		needRoot(t)
		aptGet := needTool(t, "apt-get")
		dpkg := needTool(t, "dpkg")
		if p := run(t, inherit(nil, dpkg, "-s", "idem")); p.exitStatus == (exitStatus{}) {
			t.Fatal("the idem package is installed already; remove it first (apt-get remove idem)")
		}
		var line string
		for _, l := range strings.Split(r.fill(blocks["package"]), "\n") {
			if strings.HasPrefix(l, "sudo apt-get install ") {
				line = l
			}
		}
		if line == "" {
			t.Fatal("the package block has no 'sudo apt-get install' line")
		}
		t.Cleanup(func() {
			c := inherit([]string{"DEBIAN_FRONTEND=noninteractive"}, aptGet, "remove", "-y", "-qq", "--purge", "idem")
			c.timeout = 5 * time.Minute
			output(t, c)
			if _, err := os.Stat("/usr/bin/idem"); err == nil {
				t.Error("apt-get remove idem left /usr/bin/idem")
			}
		})
		c := clean([]string{basePath(t, sudoShim(t)), "DEBIAN_FRONTEND=noninteractive"}, "/bin/bash", "-euc", line)
		c.dir, c.timeout = r.dir, 5*time.Minute
		output(t, c)
		for _, bin := range []string{"/usr/bin/idem", "/usr/bin/idem-net"} {
			if got := output(t, clean(nil, bin, "--version")); got != r.wantVersion() {
				t.Fatalf("%s --version = %q, want %q", bin, got, r.wantVersion())
			}
		}
		// cron's PATH finds it
		home := t.TempDir()
		c = command{argv: []string{"/usr/bin/env", "idem", "run", "--key", "readme:package", "--", "echo", "ran"}, env: []string{"PATH=/usr/bin:/bin", "HOME=" + home}}
		if got := output(t, c); got != "ran\n" {
			t.Fatalf("idem run from cron's PATH printed %q", got)
		}
	})

	t.Run("image", func(t *testing.T) {
		podman := needTool(t, "podman")
		image := "localhost/idem:" + r.version
		cfg := strings.TrimSpace(output(t, inherit(nil, podman, "image", "inspect", "--format",
			"{{.Config.User}}|{{range $k, $_ := .Config.Volumes}}{{$k}}{{end}}|{{range .Config.Env}}{{.}},{{end}}", image)))
		parts := strings.Split(cfg, "|")
		if len(parts) != 3 || parts[0] != "65532:65532" || parts[1] != "/var/lib/idem" || !strings.Contains(parts[2], "IDEM_LEDGER=/var/lib/idem/ledger.db,") {
			t.Fatalf("%s's config (user|volumes|env) = %q, want 65532:65532, /var/lib/idem and IDEM_LEDGER=/var/lib/idem/ledger.db", image, cfg)
		}
		// podman run is refused by this machine's sandbox (crun: setrlimit
		// RLIMIT_NOFILE: Operation not permitted): the binary comes out of
		// the image's layer and runs here with the image's environment
		ctr := strings.TrimSpace(output(t, inherit(nil, podman, "create", image)))
		t.Cleanup(func() { run(t, inherit(nil, podman, "rm", ctr)) })
		bin := t.TempDir()
		for _, name := range []string{"idem", "idem-net"} {
			output(t, inherit(nil, podman, "cp", ctr+":/usr/bin/"+name, filepath.Join(bin, name)))
			if !isStatic(t, filepath.Join(bin, name)) {
				t.Errorf("the image's %s is not statically linked", name)
			}
		}
		volume := t.TempDir()
		env := []string{"PATH=" + bin + ":/usr/bin:/bin", "IDEM_LEDGER=" + filepath.Join(volume, "ledger.db")}
		runs := regexp.MustCompile(`(?m)^(?:podman|docker) run --rm -v [a-z-]+:/var/lib/idem `+regexp.QuoteMeta(image)+` (.*)$`).FindAllStringSubmatch(r.fill(blocks["image"]), -1)
		if len(runs) < 2 {
			t.Fatalf("the image block has %d 'run --rm -v NAME:/var/lib/idem %s ...' lines, want its run and its inspect", len(runs), image)
		}
		for _, m := range runs {
			args := strings.Fields(m[1])
			out := output(t, command{argv: append([]string{filepath.Join(bin, "idem")}, args...), env: env})
			switch {
			case args[0] == "inspect" && !strings.Contains(out, "demo:version"):
				t.Errorf("%s printed %q, want the key demo:version", m[0], out)
			case args[0] == "run" && out != r.wantVersion():
				t.Errorf("%s printed %q, want %q (run, then replayed)", m[0], out, r.wantVersion())
			}
		}
	})

	t.Run("go-install", func(t *testing.T) {
		root := needGitCheckout(t)
		git, goTool := needTool(t, "git"), needTool(t, "go")
		// the module as the proxy would serve it: the committed tree but
		// the nested tools module, at a version of its own
		const v = "v0.0.1"
		proxy := t.TempDir()
		at := filepath.Join(proxy, "github.com", "idemhq", "idem", "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		runIn(t, root, nil, git, "archive", "--format=zip", "--prefix=github.com/idemhq/idem@"+v+"/",
			"-o", filepath.Join(at, v+".zip"), "HEAD", ":(exclude)tools")
		gomod := runIn(t, root, nil, git, "show", "HEAD:go.mod")
		when := strings.TrimSpace(runIn(t, root, nil, git, "log", "-1", "--format=%cI", "HEAD"))
		for name, content := range map[string]string{
			"list":      v + "\n",
			v + ".mod":  gomod,
			v + ".info": `{"Version":"` + v + `","Time":"` + when + `"}`,
		} {
			if err := os.WriteFile(filepath.Join(at, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// idem's dependencies come from this machine's module cache, itself
		// a proxy's layout: nothing is downloaded. The checksum database is
		// out of reach offline (GOSUMDB=off); the module cache verified
		// those modules when it fetched them.
		modcache := strings.TrimSpace(output(t, inherit(nil, goTool, "env", "GOMODCACHE")))
		home := t.TempDir()
		env := []string{basePath(t), "HOME=" + home, "GOPATH=" + filepath.Join(home, "go"),
			// -trimpath: the packages compiled from the module cache's
			// copy are the ones a release build compiled from the clone
			// (GOCACHE has them), instead of compiled afresh for a new path
			"GOMODCACHE=" + filepath.Join(home, "modcache"), "GOFLAGS=-modcacherw -trimpath",
			"GOPROXY=file://" + proxy + ",file://" + filepath.Join(modcache, "cache", "download"),
			"GONOSUMDB=github.com/idemhq", "GOSUMDB=off", "GOTOOLCHAIN=local",
			"GOCACHE=" + strings.TrimSpace(output(t, inherit(nil, goTool, "env", "GOCACHE")))}
		c := clean(env, "/bin/bash", "-euc", blocks["go-install"])
		c.dir, c.timeout = home, 10*time.Minute
		if out, want := output(t, c), "idem version "+v+"\n"; out != want {
			t.Fatalf("the go-install block printed %q, want %q", out, want)
		}
		for _, name := range []string{"idem", "idem-net"} {
			if !isStatic(t, filepath.Join(home, "go", "bin", name)) {
				t.Errorf("go install with CGO_ENABLED=0 gave a dynamically linked %s", name)
			}
		}
	})

	t.Run("clone", func(t *testing.T) {
		root := needGitCheckout(t)
		goTool := needTool(t, "go")
		needTool(t, "git")
		home := t.TempDir()
		env := []string{basePath(t), "HOME=" + home, "GOPATH=" + filepath.Join(home, "go"),
			"GOMODCACHE=" + strings.TrimSpace(output(t, inherit(nil, goTool, "env", "GOMODCACHE"))),
			"GOCACHE=" + strings.TrimSpace(output(t, inherit(nil, goTool, "env", "GOCACHE"))),
			"GOFLAGS=-buildvcs=true", "GOPROXY=off", "GOTOOLCHAIN=local"}
		block := strings.ReplaceAll(blocks["clone"], "<this repository>", root)
		c := clean(env, "/bin/bash", "-euc", block)
		c.dir, c.timeout = home, 10*time.Minute
		out := output(t, c)
		if !regexp.MustCompile(`^idem version v\S+`).MatchString(out) {
			t.Fatalf("the from-clone block printed %q, want idem's version", out)
		}
		for _, name := range []string{"idem", "idem-net"} {
			if !isStatic(t, filepath.Join(home, "go", "bin", name)) {
				t.Errorf("the from-clone block installed a dynamically linked %s", name)
			}
		}
	})
}
