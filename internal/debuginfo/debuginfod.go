package debuginfo

import (
	"context"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of a Debuginfod client.
const (
	// DefaultDebuginfodTimeout bounds one download, connection included.
	DefaultDebuginfodTimeout = 90 * time.Second
	// DefaultDebuginfodMaxFileBytes bounds one debug file.
	DefaultDebuginfodMaxFileBytes = 2 << 30
	// DefaultDebuginfodMaxCacheBytes bounds the cache directory; the least
	// recently used files go first.
	DefaultDebuginfodMaxCacheBytes = 8 << 30
	// DefaultDebuginfodNegativeTTL is how long a build id whose fetch
	// failed is not asked for again (elfutils' cache_miss_s is the same).
	DefaultDebuginfodNegativeTTL = 10 * time.Minute
)

// Debuginfod fetches separate debug files by GNU build id from debuginfod
// servers (GET <url>/buildid/<hex>/debuginfo) into an on-disk cache, and
// serves later requests from the cache. It is safe for concurrent use.
type Debuginfod struct {
	// URLs are the servers' base URLs, tried in order.
	URLs []string
	// CacheDir holds <build id>.debug files.
	CacheDir string
	// Client makes the requests; nil means one with Timeout.
	Client *http.Client
	// Timeout bounds one download; 0 means DefaultDebuginfodTimeout.
	Timeout time.Duration
	// MaxFileBytes bounds one file; 0 means DefaultDebuginfodMaxFileBytes.
	MaxFileBytes int64
	// MaxCacheBytes bounds the cache; 0 means DefaultDebuginfodMaxCacheBytes.
	MaxCacheBytes int64
	// NegativeTTL is how long a failure is remembered, on disk
	// (<build id>.fail in CacheDir, so that it survives the collector's
	// restarts): the build id is not asked for again until then. 0 means
	// DefaultDebuginfodNegativeTTL; negative remembers nothing.
	NegativeTTL time.Duration
	// MaxBytes bounds the debuginfo of a downloaded file, as
	// Options.MaxBytes does (0: DefaultMaxBytes): a file whose debug
	// sections declare more is refused before it is cached.
	MaxBytes int64

	mu       sync.Mutex
	inflight map[string]*flight
}

// flight serializes the fetches of one build id; refs counts the callers
// holding or waiting for it, so that the map only holds ids in flight.
type flight struct {
	mu   sync.Mutex
	refs int
}

// NewDebuginfodFromEnv returns a client for the servers in DEBUGINFOD_URLS
// (separated by blanks), with DEBUGINFOD_TIMEOUT (seconds) as its timeout
// when set, caching in $XDG_CACHE_HOME/otel-uprobe/debuginfod (or
// $HOME/.cache/otel-uprobe/debuginfod). It returns nil, nil when
// DEBUGINFOD_URLS is unset or empty.
func NewDebuginfodFromEnv() (*Debuginfod, error) {
	urls := strings.Fields(os.Getenv("DEBUGINFOD_URLS"))
	if len(urls) == 0 {
		return nil, nil
	}
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") {
			return nil, fmt.Errorf("DEBUGINFOD_URLS: %q is not an http(s) URL", u)
		}
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return nil, fmt.Errorf("finding the cache directory for debuginfod: %w", err)
	}
	d := &Debuginfod{URLs: urls, CacheDir: filepath.Join(base, "otel-uprobe", "debuginfod")}
	if s := os.Getenv("DEBUGINFOD_TIMEOUT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("DEBUGINFOD_TIMEOUT: %q is not a positive number of seconds", s)
		}
		d.Timeout = time.Duration(n) * time.Second
	}
	return d, nil
}

// cachePath is where the file of a build id lives in the cache.
func (d *Debuginfod) cachePath(buildID string) string {
	return filepath.Join(d.CacheDir, buildID+".debug")
}

// failPath is where the failure of a build id is remembered.
func (d *Debuginfod) failPath(buildID string) string {
	return filepath.Join(d.CacheDir, buildID+".fail")
}

func (d *Debuginfod) negativeTTL() time.Duration {
	if d.NegativeTTL == 0 {
		return DefaultDebuginfodNegativeTTL
	}
	return d.NegativeTTL
}

// maxFailText bounds the error text a .fail file keeps.
const maxFailText = 1024

// failedRecently returns the failure remembered for a build id, if it is
// younger than NegativeTTL.
func (d *Debuginfod) failedRecently(buildID string) error {
	ttl := d.negativeTTL()
	if ttl < 0 {
		return nil
	}
	p := d.failPath(buildID)
	st, err := os.Lstat(p)
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	age := time.Since(st.ModTime())
	if age > ttl || age < -time.Minute {
		return nil
	}
	fh, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer fh.Close()
	why, _ := io.ReadAll(io.LimitReader(fh, maxFailText))
	return fmt.Errorf("debuginfod: build id %s failed %s ago (%s); not asked again before %s: %w",
		buildID, age.Round(time.Second), strings.TrimSpace(string(why)), (ttl - age).Round(time.Second), ErrDebuginfodFailed)
}

// ErrDebuginfodFailed says debuginfod failed for a build id a short while
// ago, and is not asked again yet.
var ErrDebuginfodFailed = errors.New("debuginfod failed recently")

// remember records the failure of a build id (its time is the file's).
func (d *Debuginfod) remember(buildID string, why error) {
	if d.negativeTTL() < 0 {
		return
	}
	text := why.Error()
	if len(text) > maxFailText {
		text = text[:maxFailText]
	}
	_ = os.MkdirAll(d.CacheDir, 0o755)
	tmp, err := os.CreateTemp(d.CacheDir, ".tmp-"+buildID+"-*")
	if err != nil {
		return
	}
	_, err = tmp.WriteString(text + "\n")
	if err = errors.Join(err, tmp.Close()); err == nil {
		err = os.Rename(tmp.Name(), d.failPath(buildID))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
}

// Reject removes the cached file of a build id that turned out unusable
// (its debuginfo malformed or over the budget) and remembers why, so that
// it is neither read again from the cache nor downloaded again before
// NegativeTTL.
func (d *Debuginfod) Reject(buildID string, why error) {
	if _, err := hex.DecodeString(buildID); err != nil || len(buildID) < 2 || len(buildID) > 128 {
		return
	}
	buildID = strings.ToLower(buildID)
	fl := d.acquire(buildID)
	defer d.release(buildID, fl)
	_ = os.Remove(d.cachePath(buildID))
	d.remember(buildID, why)
}

// Fetch returns the path of the debug file of a build id (lowercase hex),
// from the cache or else downloaded from the first server that has it. A
// downloaded file must be an ELF file with that build id, at most
// MaxFileBytes, with DWARF whose sections fit MaxBytes (nothing that does
// not parse is cached); it is written to a temporary file and renamed into
// place, so that readers never see a partial file. Concurrent calls for
// one build id download it once. A failure (no server has it, a refused
// answer, a timeout) is remembered for NegativeTTL, on disk: the build id
// is not asked for again before then, and the error wraps
// ErrDebuginfodFailed. Downloads end when ctx does (a cancellation is not
// remembered; a deadline is).
func (d *Debuginfod) Fetch(ctx context.Context, buildID string) (string, error) {
	if _, err := hex.DecodeString(buildID); err != nil || len(buildID) < 2 || len(buildID) > 128 {
		return "", fmt.Errorf("debuginfod: build id %q is not hex", buildID)
	}
	buildID = strings.ToLower(buildID)
	fl := d.acquire(buildID)
	defer d.release(buildID, fl)

	p := d.cachePath(buildID)
	if _, err := os.Stat(p); err == nil {
		now := time.Now()
		_ = os.Chtimes(p, now, now) // most recently used
		return p, nil
	}
	if err := d.failedRecently(buildID); err != nil {
		return "", err
	}
	if err := os.MkdirAll(d.CacheDir, 0o755); err != nil {
		return "", fmt.Errorf("debuginfod: creating cache %s: %w", d.CacheDir, err)
	}
	var errs []error
	for _, base := range d.URLs {
		err := d.download(ctx, base, buildID, p)
		if err == nil {
			if err := d.evict(p); err != nil {
				return "", err
			}
			return p, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	err := fmt.Errorf("debuginfod: build id %s: %w", buildID, errors.Join(errs...))
	if !errors.Is(ctx.Err(), context.Canceled) {
		d.remember(buildID, err)
	}
	return "", err
}

func (d *Debuginfod) acquire(id string) *flight {
	d.mu.Lock()
	if d.inflight == nil {
		d.inflight = map[string]*flight{}
	}
	fl, ok := d.inflight[id]
	if !ok {
		fl = &flight{}
		d.inflight[id] = fl
	}
	fl.refs++
	d.mu.Unlock()
	fl.mu.Lock()
	return fl
}

func (d *Debuginfod) release(id string, fl *flight) {
	fl.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if fl.refs--; fl.refs == 0 {
		delete(d.inflight, id)
	}
}

// download fetches one file from one server into dst.
func (d *Debuginfod) download(ctx context.Context, base, buildID, dst string) error {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultDebuginfodTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := strings.TrimRight(base, "/") + "/buildid/" + buildID + "/debuginfo"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("requesting %s: %w", u, err)
	}
	client := d.Client
	if client == nil {
		client = &http.Client{Timeout: timeout}
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("requesting %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("requesting %s: %s", u, resp.Status)
	}
	limit := d.MaxFileBytes
	if limit <= 0 {
		limit = DefaultDebuginfodMaxFileBytes
	}
	if resp.ContentLength > limit {
		return fmt.Errorf("requesting %s: %d bytes, over the %d-byte limit", u, resp.ContentLength, limit)
	}
	tmp, err := os.CreateTemp(d.CacheDir, ".tmp-"+buildID+"-*")
	if err != nil {
		return fmt.Errorf("debuginfod: creating temporary file: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	n, err := io.Copy(tmp, io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("downloading %s: %w", u, err)
	}
	if n > limit {
		return fmt.Errorf("downloading %s: over the %d-byte limit", u, limit)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := checkDebugFile(tmp.Name(), buildID, d.MaxBytes); err != nil {
		return fmt.Errorf("checking %s: %w", u, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("debuginfod: storing %s: %w", dst, err)
	}
	keep = true
	return nil
}

// checkDebugFile checks that the file at p is ELF with the given build id
// and DWARF whose sections (as declared, nothing is decompressed) and
// other sections fit maxBytes (0: DefaultMaxBytes).
func checkDebugFile(p, want string, maxBytes int64) (err error) {
	ef, err := elf.Open(p)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ef.Close()) }()
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if err := CheckELF(ef, maxBytes); err != nil {
		return err
	}
	id, err := BuildID(ef)
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(id); got != want {
		return fmt.Errorf("build id %q, want %q: %w", got, want, ErrBuildIDMismatch)
	}
	if !hasDWARF(ef) {
		return fmt.Errorf("no DWARF: %w", ErrNoDebugInfo)
	}
	var total uint64
	for _, name := range dwarfSections {
		if s := sectionOf(ef, name); s != nil {
			total += declaredSize(s)
		}
	}
	if total > uint64(maxBytes) {
		return fmt.Errorf("debug sections of %d bytes once decompressed, over the %d-byte budget of one file's debuginfo (max_debuginfo_bytes): %w", total, maxBytes, ErrOverBudget)
	}
	return nil
}

// evict removes the least recently used files (by modification time) until
// the cache is within MaxCacheBytes; keep is never removed. Stale temporary
// files of interrupted downloads older than an hour go too.
func (d *Debuginfod) evict(keep string) error {
	limit := d.MaxCacheBytes
	if limit <= 0 {
		limit = DefaultDebuginfodMaxCacheBytes
	}
	ents, err := os.ReadDir(d.CacheDir)
	if err != nil {
		return fmt.Errorf("debuginfod: reading cache %s: %w", d.CacheDir, err)
	}
	type file struct {
		path  string
		size  int64
		mtime time.Time
	}
	var files []file
	var total int64
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		p := filepath.Join(d.CacheDir, e.Name())
		if strings.HasPrefix(e.Name(), ".tmp-") {
			if time.Since(info.ModTime()) > time.Hour {
				_ = os.Remove(p)
			}
			continue
		}
		if strings.HasSuffix(e.Name(), ".fail") {
			if ttl := d.negativeTTL(); ttl < 0 || time.Since(info.ModTime()) > ttl {
				_ = os.Remove(p)
			}
			continue
		}
		if !strings.HasSuffix(e.Name(), ".debug") {
			continue
		}
		files = append(files, file{p, info.Size(), info.ModTime()})
		total += info.Size()
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mtime.Before(files[j].mtime) })
	for _, fl := range files {
		if total <= limit {
			break
		}
		if fl.path == keep {
			continue
		}
		if err := os.Remove(fl.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("debuginfod: evicting %s: %w", fl.path, err)
		}
		total -= fl.size
	}
	return nil
}
