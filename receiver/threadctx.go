//go:build linux && (amd64 || arm64)

package receiver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/threadctx"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

// Bounds of the thread-context lookups.
const (
	// maxThreadRequests bounds the processes waiting to be looked at; the
	// engine asks again for one dropped (bpfobj.ThreadAskNs later).
	maxThreadRequests = 1024
	// maxKeyMaps bounds the processes whose key maps are kept.
	maxKeyMaps = 4096
	// keyMapRefresh is how often, at most, a process's key map is read
	// again because a record used a key index it lacks.
	keyMapRefresh = time.Second
)

// threadEngine is what the thread-context lookups need of the tracer.
type threadEngine interface {
	SetThreadContext(pid uint32, image event.Image, a tracer.ThreadAccess) error
}

// threadRequest asks for one process image's thread-context access, or
// (keysOnly) for its key map again.
type threadRequest struct {
	pid      uint32
	image    event.Image
	keysOnly bool
}

// keyMap is a process image's threadlocal.attribute_key_map.
type keyMap struct {
	image event.Image
	names []string
	read  time.Time
	asked bool // a refresh is queued
}

// threadContexts answers the engine's requests for the thread-context
// access of processes (OTEP 4947): it looks for otel_thread_ctx_v1 in the
// modules a process maps (internal/threadctx), on a goroutine of its own
// beside the drain goroutine, and writes what it found into the engine.
// With a target that takes the contexts' attributes it also keeps each
// process's key map (its OTEP 4719 process context) for the span builder.
type threadContexts struct {
	log        *zap.Logger
	tel        *metadata.TelemetryBuilder
	engine     threadEngine
	finder     threadctx.Finder // the run goroutine's
	attributes bool
	requests   chan threadRequest
	// looked, when set, is called after each lookup with its result (a
	// test's seam, set while the receiver runs).
	looked atomic.Pointer[func(pid uint32, result string, a threadctx.Access)]

	mu   sync.Mutex
	keys map[uint32]*keyMap
}

func newThreadContexts(log *zap.Logger, tel *metadata.TelemetryBuilder, engine threadEngine, fs procfs.FS, attributes bool) *threadContexts {
	return &threadContexts{
		log: log, tel: tel, engine: engine, finder: threadctx.Finder{FS: fs}, attributes: attributes,
		requests: make(chan threadRequest, maxThreadRequests), keys: map[uint32]*keyMap{},
	}
}

// ask queues a lookup of a process image; it never blocks (a full queue
// drops the request, and counts it).
func (t *threadContexts) ask(ctx context.Context, pid uint32, image event.Image) {
	select {
	case t.requests <- threadRequest{pid: pid, image: image}:
	default:
		t.count(ctx, metadata.AttributeLookupResultDropped)
	}
}

// forget drops what is kept of a process that execed or exited.
func (t *threadContexts) forget(pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.keys, pid)
}

func (t *threadContexts) count(ctx context.Context, result metadata.AttributeLookupResult) {
	t.tel.ReceiverUprobeThreadContextLookups.Add(ctx, 1, metric.WithAttributes(attribute.String("lookup.result", result.String())))
}

// run answers requests until ctx ends.
func (t *threadContexts) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-t.requests:
			if req.keysOnly {
				t.readKeys(req)
				continue
			}
			t.lookup(ctx, req)
		}
	}
}

// lookup looks for the variable in one process and tells the engine.
func (t *threadContexts) lookup(ctx context.Context, req threadRequest) {
	res, err := t.finder.Find(int(req.pid), t.attributes)
	if res.Context != nil {
		t.setKeys(req, res.Context.Keys)
	}
	var a tracer.ThreadAccess
	var result metadata.AttributeLookupResult
	switch {
	case errors.Is(err, threadctx.ErrNotReady):
		// Left as asked: the engine asks again at a span that opens
		// bpfobj.ThreadAskNs later.
		t.count(ctx, metadata.AttributeLookupResultNotReady)
		t.report(req.pid, metadata.AttributeLookupResultNotReady, res.Access)
		return
	case err != nil:
		t.log.Debug("Looking for the thread context", zap.Uint32("pid", req.pid), zap.Error(err))
		a.None, result = true, metadata.AttributeLookupResultFailed
	case !res.Found:
		a.None, result = true, metadata.AttributeLookupResultNone
	case res.Access.Mode == threadctx.ModeDTV:
		a = tracer.ThreadAccess{DTV: true, Offset: res.Access.Offset, Module: res.Access.ModuleID}
		result = metadata.AttributeLookupResultDtv
	default:
		a = tracer.ThreadAccess{Offset: res.Access.Offset}
		result = metadata.AttributeLookupResultStatic
	}
	if res.Found {
		t.log.Debug("Thread context found", zap.Uint32("pid", req.pid), zap.String("module", res.Access.Module),
			zap.String("how", res.Access.How))
	}
	if err := t.engine.SetThreadContext(req.pid, req.image, a); err != nil {
		return // it execed or exited meanwhile
	}
	t.count(ctx, result)
	t.report(req.pid, result, res.Access)
}

func (t *threadContexts) report(pid uint32, result metadata.AttributeLookupResult, a threadctx.Access) {
	if f := t.looked.Load(); f != nil {
		(*f)(pid, result.String(), a)
	}
}

// setKeys keeps a process image's key map.
func (t *threadContexts) setKeys(req threadRequest, names []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.keys[req.pid]; !ok && len(t.keys) >= maxKeyMaps {
		clear(t.keys)
	}
	t.keys[req.pid] = &keyMap{image: req.image, names: names, read: time.Now()}
}

// readKeys reads a process's key map again.
func (t *threadContexts) readKeys(req threadRequest) {
	pc, err := t.finder.ProcessContext(int(req.pid))
	t.mu.Lock()
	if k := t.keys[req.pid]; k != nil && k.image == req.image {
		k.asked = false
	}
	t.mu.Unlock()
	if err == nil && pc != nil {
		t.setKeys(req, pc.Keys)
	}
}

// keysOf returns the key map of a process image, nil when unknown (the
// span builder's Settings.ThreadKeys).
func (t *threadContexts) keysOf(pid uint32, image event.Image) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k := t.keys[pid]; k != nil && k.image == image {
		return k.names
	}
	return nil
}

// stale asks for a process image's key map again, at most every
// keyMapRefresh (the span builder's Settings.ThreadKeysStale).
func (t *threadContexts) stale(pid uint32, image event.Image) {
	t.mu.Lock()
	k := t.keys[pid]
	if k == nil || k.image != image {
		if len(t.keys) >= maxKeyMaps {
			clear(t.keys)
		}
		k = &keyMap{image: image}
		t.keys[pid] = k
	}
	if k.asked || time.Since(k.read) < keyMapRefresh {
		t.mu.Unlock()
		return
	}
	k.asked = true
	t.mu.Unlock()
	select {
	case t.requests <- threadRequest{pid: pid, image: image, keysOnly: true}:
	default:
		t.mu.Lock()
		k.asked = false
		t.mu.Unlock()
	}
}
