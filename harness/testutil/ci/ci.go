// Package ci makes tests that need privileges or tools fail instead of
// skipping when they run in CI (CI=true): a green run that skipped the
// kernel tests would be a lie. It imports nothing of the receiver, so that
// every package's tests can use it.
package ci

import (
	"os"
	"testing"
)

// InCI reports whether the tests run in CI, where nothing may be skipped.
func InCI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips the test, or fails it in CI.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true and this test cannot run: "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireRoot skips the test unless it runs as root (and fails it in CI).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root to load BPF programs and attach uprobes")
	}
}
