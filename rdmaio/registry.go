package rdmaio

import (
	"fmt"
	"slices"
	"sync"
)

var (
	providersMu sync.RWMutex
	providers   = map[string]Provider{}
)

// Register makes a provider available under name. Like database/sql.Register
// it is meant for init functions and panics when p is nil or name is taken,
// both programming errors.
func Register(name string, p Provider) {
	providersMu.Lock()
	defer providersMu.Unlock()
	if p == nil {
		panic("rdmaio: Register of nil provider " + name)
	}
	if _, dup := providers[name]; dup {
		panic("rdmaio: Register called twice for provider " + name)
	}
	providers[name] = p
}

// Providers returns the names of the registered providers, sorted.
func Providers() []string {
	providersMu.RLock()
	defer providersMu.RUnlock()
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Open opens a device of the named provider.
func Open(name string, cfg Config) (Device, error) {
	providersMu.RLock()
	p, ok := providers[name]
	providersMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("rdmaio: open %q (registered: %v): %w", name, Providers(), ErrUnknownProvider)
	}
	d, err := p.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("rdmaio: open %q: %w", name, err)
	}
	return d, nil
}
