// Package ctxfixture says how the thread-context fixture (testdata/threadctx:
// an application whose SDK publishes each thread's active span, OTEP 4947)
// is built in each of its variants, for the tests that build it on the host
// (harness/testutil) and for the arm64 VM that gets it prebuilt
// (harness/armvm). It imports nothing of the testing package.
package ctxfixture

import "path/filepath"

// The files of a build: the application and, unless the writer is linked
// into it, the SDK's library next to it (found through the run path $ORIGIN).
const (
	App = "ctxapp"
	Lib = "libctx.so"
)

// Variant is one build: where otel_thread_ctx_v1 lives and how the
// application reaches it.
type Variant struct {
	Name string
	// Model is how libctx.so reaches the variable: "gnu2" (TLSDESC:
	// -mtls-dialect=gnu2 on x86-64, desc on arm64), "gnu" (legacy general
	// dynamic: gnu, trad on arm64) or "ie" (initial-exec); "" links the
	// writer into the executable (static TLS, exported with
	// --export-dynamic-symbol).
	Model string
	// DLOpen: the application loads libctx.so with dlopen when told
	// ("open"), long after it started.
	DLOpen bool
}

// Variants are every build the tests use.
var Variants = []Variant{
	{Name: "exe"},
	{Name: "gnu2", Model: "gnu2"},
	{Name: "gnu", Model: "gnu"},
	{Name: "ie", Model: "ie"},
	{Name: "dlopen-gnu2", Model: "gnu2", DLOpen: true},
	{Name: "dlopen-gnu", Model: "gnu", DLOpen: true},
}

// ByName returns the variant of a name.
func ByName(name string) (Variant, bool) {
	for _, v := range Variants {
		if v.Name == name {
			return v, true
		}
	}
	return Variant{}, false
}

// modelFlags returns the compiler flags of a TLS model on an architecture
// (GOARCH).
func modelFlags(model, arch string) []string {
	switch {
	case model == "ie":
		return []string{"-ftls-model=initial-exec"}
	case arch == "arm64" && model == "gnu2":
		return []string{"-mtls-dialect=desc"}
	case arch == "arm64" && model == "gnu":
		return []string{"-mtls-dialect=trad"}
	}
	return []string{"-mtls-dialect=" + model}
}

// Commands returns the arguments of the C compiler runs that build the
// variant for arch (GOARCH) from the sources in src into dir, in order.
func (v Variant) Commands(arch, src, dir string) [][]string {
	base := []string{"-O2", "-g", "-Wall", "-Werror", "-I", src}
	app := filepath.Join(src, "ctxapp.c")
	out := filepath.Join(dir, App)
	if v.Model == "" {
		return [][]string{append(base, "-o", out, app, filepath.Join(src, "ctxlib.c"),
			"-Wl,--export-dynamic-symbol=otel_thread_ctx_v1", "-pthread")}
	}
	lib := append(append(append([]string{}, base...), "-fPIC", "-shared"), modelFlags(v.Model, arch)...)
	lib = append(lib, "-o", filepath.Join(dir, Lib), filepath.Join(src, "ctxlib.c"))
	prog := append(append([]string{}, base...), "-o", out, app, "-Wl,-rpath,$ORIGIN", "-pthread")
	if v.DLOpen {
		prog = append(prog, "-DCTX_DLOPEN", "-ldl")
	} else {
		prog = append(prog, "-L", dir, "-lctx")
	}
	return [][]string{lib, prog}
}

// PrebuiltDir is the directory of the variant's build among the fixtures
// harness/armvm prebuilds for the arm64 VM (under testutil.Prebuilt).
func (v Variant) PrebuiltDir() string { return "threadctx-" + v.Name }

// Files returns the files of a build in its directory.
func (v Variant) Files() []string {
	if v.Model == "" {
		return []string{App}
	}
	return []string{App, Lib}
}
