// Package network owns Annex's address model, in pure Go with no Kubernetes
// types: deciding whether a remote cluster's CIDR must be remapped into this
// cluster's view (it overlaps a local CIDR or another peer's CIDR already in
// use), allocating the remapped CIDR from a pool (lowest free block of the same
// size, so reruns are stable), translating addresses between a CIDR and its
// remapping (keep the host bits, swap the prefix), allocating stable
// per-key transit addresses inside a CIDR (Allocator), and the rules a
// peer's CIDR claims must pass (CheckPeerCIDR: private ranges only, clear
// of this cluster's service CIDR and nodes). Both IPv4 and IPv6 work.
//
// docs/network.md describes the rules and a worked example.
package network

import (
	"errors"
	"fmt"
	"net/netip"
)

// DefaultPool is the range remapped CIDRs are allocated from unless told
// otherwise: the shared address space of RFC 6598, which neither clusters nor
// the Internet normally use.
const DefaultPool = "100.64.0.0/10"

// ErrNoFreeCIDR says the pool has no free block of the size asked for.
var ErrNoFreeCIDR = errors.New("no free CIDR left in the pool")

// ParseCIDR parses a CIDR and insists on canonical form (no host bits set),
// as the API does.
func ParseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR: %w", s, err)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("CIDR %s has host bits set (did you mean %s?)", s, m)
	}
	return p, nil
}

// Overlap returns the first prefix of sets that overlaps p.
func Overlap(p netip.Prefix, sets ...[]netip.Prefix) (netip.Prefix, bool) {
	for _, set := range sets {
		for _, q := range set {
			if q.IsValid() && p.Overlaps(q) {
				return q, true
			}
		}
	}
	return netip.Prefix{}, false
}

// NeedsRemap says whether a remote CIDR must be remapped in this cluster's
// view: it overlaps one of local (this cluster's pod, service and external
// CIDRs) or one of inUse (CIDRs of other peers as this cluster already sees
// them, remapped or not). A CIDR that overlaps nothing is used as it is.
func NeedsRemap(local []netip.Prefix, remote netip.Prefix, inUse []netip.Prefix) bool {
	_, ok := Overlap(remote, local, inUse)
	return ok
}

// AllocateCIDR returns the lowest block of prefix length bits inside pool
// that overlaps none of reserved (prefixes of the other address family are
// ignored). The same inputs always give the same block. It returns
// ErrNoFreeCIDR when no block is free or a /bits does not fit in the pool.
func AllocateCIDR(pool netip.Prefix, bits int, reserved []netip.Prefix) (netip.Prefix, error) {
	if !pool.IsValid() {
		return netip.Prefix{}, errors.New("invalid pool")
	}
	pool = pool.Masked()
	if bits < pool.Bits() || bits > pool.Addr().BitLen() {
		return netip.Prefix{}, fmt.Errorf("%w: a /%d does not fit in pool %s", ErrNoFreeCIDR, bits, pool)
	}
	rs := make([]netip.Prefix, 0, len(reserved))
	for _, r := range reserved {
		if r.IsValid() && r.Addr().Is4() == pool.Addr().Is4() && r.Overlaps(pool) {
			rs = append(rs, r.Masked())
		}
	}
	// Every candidate is aligned to its size. When it overlaps reserved
	// prefixes, each of them either contains it or lies inside it, so the
	// address after the furthest end is aligned again; every reserved prefix
	// is passed at most once.
	for cur := pool.Addr(); cur.IsValid() && pool.Contains(cur); {
		cand := netip.PrefixFrom(cur, bits)
		end := LastAddr(cand)
		hit := false
		for _, r := range rs {
			if r.Overlaps(cand) {
				hit = true
				if e := LastAddr(r); e.Compare(end) > 0 {
					end = e
				}
			}
		}
		if !hit {
			return cand, nil
		}
		cur = end.Next()
	}
	return netip.Prefix{}, fmt.Errorf("%w: every /%d of %s overlaps a CIDR in use", ErrNoFreeCIDR, bits, pool)
}

// LastAddr returns the last address of p (the broadcast address for IPv4).
func LastAddr(p netip.Prefix) netip.Addr {
	b := addrBytes(p.Masked().Addr())
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return addrFrom(b)
}

// GatewayAddr is the address a cluster's gateway uses in its external CIDR
// ext (the last usable one): the source of the packets it relays for other
// clusters. Transit addresses are never allocated there.
func GatewayAddr(ext netip.Prefix) netip.Addr {
	return LastAddr(ext).Prev()
}

func addrBytes(a netip.Addr) []byte {
	if a.Is4() {
		b := a.As4()
		return b[:]
	}
	b := a.As16()
	return b[:]
}

func addrFrom(b []byte) netip.Addr {
	if len(b) == 4 {
		return netip.AddrFrom4([4]byte(b))
	}
	return netip.AddrFrom16([16]byte(b))
}
