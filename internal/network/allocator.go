package network

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"
)

// ErrExhausted says an Allocator has no free address left.
var ErrExhausted = errors.New("no free address left")

// Allocator hands out stable addresses of one CIDR to keys (for example the
// transit addresses a consumer gives, from its external CIDR, to pods of
// other clusters, keyed by pod UID). A key keeps its address until it is
// released. The network address is never given out, nor the broadcast
// address of an IPv4 CIDR (unless the CIDR is a /31 or /32, RFC 3021), nor
// anything inside a reserved prefix.
//
// Allocation is next-fit: a released address is given out again only after
// the rest of the CIDR has been used, so a stale peer is unlikely to reach a
// new owner. The state (key → address) can be saved with State and rebuilt
// with Restore or Assign, for example from API objects after a restart.
// An Allocator is safe for concurrent use.
type Allocator struct {
	cidr        netip.Prefix
	first, last netip.Addr
	reserved    []netip.Prefix

	mu     sync.Mutex
	byKey  map[string]netip.Addr
	byAddr map[netip.Addr]string
	next   netip.Addr
}

// NewAllocator returns an empty Allocator for cidr, never handing out
// addresses inside reserved.
func NewAllocator(cidr netip.Prefix, reserved ...netip.Prefix) (*Allocator, error) {
	if !cidr.IsValid() {
		return nil, errors.New("allocator: invalid CIDR")
	}
	cidr = cidr.Masked()
	a := &Allocator{cidr: cidr, first: cidr.Addr(), last: LastAddr(cidr),
		byKey: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{}}
	hostBits := cidr.Addr().BitLen() - cidr.Bits()
	if hostBits >= 2 {
		a.first = a.first.Next() // the network address
		if cidr.Addr().Is4() {
			a.last = a.last.Prev() // the broadcast address
		}
	}
	for _, r := range reserved {
		if r.IsValid() && r.Overlaps(cidr) {
			a.reserved = append(a.reserved, r.Masked())
		}
	}
	a.next = a.first
	return a, nil
}

// CIDR returns the CIDR addresses are allocated from.
func (a *Allocator) CIDR() netip.Prefix { return a.cidr }

// Allocate returns key's address, allocating a free one if key has none.
func (a *Allocator) Allocate(key string) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if addr, ok := a.byKey[key]; ok {
		return addr, nil
	}
	addr, ok := a.findFree()
	if !ok {
		return netip.Addr{}, fmt.Errorf("allocate an address of %s for %q: %w", a.cidr, key, ErrExhausted)
	}
	a.byKey[key], a.byAddr[addr] = addr, key
	a.next = addr.Next()
	return addr, nil
}

// findFree scans from a.next to the end of the range, then from its start,
// jumping over reserved prefixes: at most one step per allocated address and
// one per reserved prefix and pass.
func (a *Allocator) findFree() (netip.Addr, bool) {
	start := a.next
	if !a.usable(start) {
		start = a.first
	}
	cur, wrapped := start, false
	for {
		if !a.usable(cur) {
			if wrapped {
				return netip.Addr{}, false
			}
			cur, wrapped = a.first, true
		}
		if wrapped && cur.Compare(start) >= 0 {
			return netip.Addr{}, false
		}
		if r, ok := a.reservedAt(cur); ok {
			cur = LastAddr(r).Next()
			continue
		}
		if _, taken := a.byAddr[cur]; taken {
			cur = cur.Next()
			continue
		}
		return cur, true
	}
}

func (a *Allocator) usable(addr netip.Addr) bool {
	return addr.IsValid() && addr.Compare(a.first) >= 0 && addr.Compare(a.last) <= 0
}

func (a *Allocator) reservedAt(addr netip.Addr) (netip.Prefix, bool) {
	for _, r := range a.reserved {
		if r.Contains(addr) {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

// check says why addr cannot be given to key, or nil.
func (a *Allocator) check(key string, addr netip.Addr) error {
	if !a.usable(addr) {
		return fmt.Errorf("%s is not an allocatable address of %s", addr, a.cidr)
	}
	if r, ok := a.reservedAt(addr); ok {
		return fmt.Errorf("%s is inside reserved %s", addr, r)
	}
	if owner, ok := a.byAddr[addr]; ok && owner != key {
		return fmt.Errorf("%s already belongs to %q", addr, owner)
	}
	if have, ok := a.byKey[key]; ok && have != addr {
		return fmt.Errorf("%q already has %s", key, have)
	}
	return nil
}

// Assign gives key the address addr, as when rebuilding the state from
// objects that record it. It fails if addr is not allocatable or belongs to
// another key, or if key already has another address.
func (a *Allocator) Assign(key string, addr netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.check(key, addr); err != nil {
		return fmt.Errorf("assign %s to %q: %w", addr, key, err)
	}
	a.byKey[key], a.byAddr[addr] = addr, key
	if addr.Compare(a.next) >= 0 {
		a.next = addr.Next()
	}
	return nil
}

// Restore assigns every key of state its address, all or nothing.
func (a *Allocator) Restore(state map[string]netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	owners := make(map[netip.Addr]string, len(state))
	for key, addr := range state {
		if err := a.check(key, addr); err != nil {
			return fmt.Errorf("restore %q: %w", key, err)
		}
		if other, dup := owners[addr]; dup {
			return fmt.Errorf("restore: %s given to both %q and %q", addr, other, key)
		}
		owners[addr] = key
	}
	for key, addr := range state {
		a.byKey[key], a.byAddr[addr] = addr, key
		if addr.Compare(a.next) >= 0 {
			a.next = addr.Next()
		}
	}
	return nil
}

// Lookup returns key's address, if it has one.
func (a *Allocator) Lookup(key string) (netip.Addr, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	addr, ok := a.byKey[key]
	return addr, ok
}

// Owner returns the key that holds addr, if any.
func (a *Allocator) Owner(addr netip.Addr) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key, ok := a.byAddr[addr]
	return key, ok
}

// Release frees key's address and says whether it had one.
func (a *Allocator) Release(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	addr, ok := a.byKey[key]
	if ok {
		delete(a.byKey, key)
		delete(a.byAddr, addr)
	}
	return ok
}

// Len returns how many keys hold an address.
func (a *Allocator) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byKey)
}

// State returns a copy of the key → address table; it marshals to JSON as
// a map of strings and feeds Restore.
func (a *Allocator) State() map[string]netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.byKey)
}
