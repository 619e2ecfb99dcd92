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

// Usable reports whether the named provider is registered and, if it is a
// Prober, finds a device on this host: nil when it does, else an error
// wrapping ErrUnknownProvider or the provider's ErrNoDevice.
func Usable(name string) error {
	providersMu.RLock()
	p, ok := providers[name]
	providersMu.RUnlock()
	if !ok {
		return fmt.Errorf("rdmaio: %q (registered: %v): %w", name, Providers(), ErrUnknownProvider)
	}
	if pr, ok := p.(Prober); ok {
		if err := pr.Probe(); err != nil {
			return fmt.Errorf("rdmaio: %q: %w", name, err)
		}
	}
	return nil
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
