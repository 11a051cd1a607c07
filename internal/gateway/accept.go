package gateway

import (
	"encoding/binary"
	"net/netip"
	"slices"
)

// addrRange is an inclusive range of IPv4 addresses.
type addrRange struct{ first, last uint32 }

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func addr4(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// ranges merges the IPv4 prefixes of ps (others are ignored) into sorted,
// disjoint, non-adjacent ranges.
func ranges(ps []netip.Prefix) []addrRange {
	rs := make([]addrRange, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() || !p.Addr().Is4() {
			continue
		}
		first := u32(p.Masked().Addr())
		size := uint64(1) << (32 - p.Bits())
		rs = append(rs, addrRange{first, uint32(uint64(first) + size - 1)}) //nolint:gosec // G115: first is aligned to size, so the last address fits
	}
	slices.SortFunc(rs, func(a, b addrRange) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && (out[n-1].last == ^uint32(0) || r.first <= out[n-1].last+1) {
			if r.last > out[n-1].last {
				out[n-1].last = r.last
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// Aggregate returns the fewest IPv4 prefixes that cover exactly the
// addresses of ps (IPv6 prefixes are left out), sorted: what the agent
// writes as a link's accept list, so that the pod IPs of a namespace
// (often consecutive) take a few lines rather than one each.
func Aggregate(ps []netip.Prefix) []netip.Prefix {
	out := []netip.Prefix{}
	for _, r := range ranges(ps) {
		cur := uint64(r.first)
		for cur <= uint64(r.last) {
			// The largest block aligned at cur that ends by r.last.
			bits := 32
			for bits > 0 {
				size := uint64(1) << (32 - (bits - 1))
				if cur%size != 0 || cur+size-1 > uint64(r.last) {
					break
				}
				bits--
			}
			out = append(out, netip.PrefixFrom(addr4(uint32(cur)), bits)) //nolint:gosec // G115: cur <= r.last, a uint32
			cur += uint64(1) << (32 - bits)
		}
	}
	return out
}
