//go:build linux && (amd64 || arm64)

package receiver

import (
	"sync"

	"go.opentelemetry.io/collector/receiver"
)

// sharedInstances maps each configuration to its one receiver, so that the
// traces and metrics pipelines share the attached probes. An instance leaves
// the map when it shuts down, so a reloaded configuration gets a new one.
type sharedInstances struct {
	mu        sync.Mutex
	instances map[*Config]*uprobeReceiver
}

func newSharedInstances() *sharedInstances {
	return &sharedInstances{instances: map[*Config]*uprobeReceiver{}}
}

// get returns the instance of cfg, creating it on first use.
func (s *sharedInstances) get(cfg *Config, set receiver.Settings) (*uprobeReceiver, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.instances[cfg]; ok {
		return r, nil
	}
	r, err := newReceiver(cfg, set, func() { s.remove(cfg) })
	if err != nil {
		return nil, err
	}
	s.instances[cfg] = r
	return r, nil
}

func (s *sharedInstances) remove(cfg *Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.instances, cfg)
}
