package network

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"testing"
)

// The seed corpus below makes these fuzz targets run as ordinary tests;
// `go test -fuzz=FuzzTranslateRoundTrip ./internal/network/` explores further.

func toInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(addrBytes(a)) }

func fromInt(i *big.Int, v6 bool) netip.Addr {
	n := 4
	if v6 {
		n = 16
	}
	b := make([]byte, n)
	i.FillBytes(b)
	return addrFrom(b)
}

// fuzzAddr builds an address of the family from arbitrary bytes.
func fuzzAddr(b []byte, v6 bool) netip.Addr {
	n := 4
	if v6 {
		n = 16
	}
	buf := make([]byte, n)
	copy(buf, b)
	return addrFrom(buf)
}

func hostMask(bits, total int) *big.Int {
	m := new(big.Int).Lsh(big.NewInt(1), uint(total-bits))
	return m.Sub(m, big.NewInt(1))
}

func FuzzTranslateRoundTrip(f *testing.F) {
	f.Add([]byte{10, 200, 0, 0}, []byte{100, 64, 0, 0}, uint8(16), []byte{0, 0, 3, 7}, false)
	f.Add([]byte{10, 128, 0, 0}, []byte{100, 0, 0, 0}, uint8(9), []byte{0, 1, 1, 2}, false)
	f.Add([]byte{1, 2, 3, 4}, []byte{5, 6, 7, 8}, uint8(0), []byte{9, 9, 9, 9}, false)
	f.Add([]byte{1, 2, 3, 4}, []byte{5, 6, 7, 8}, uint8(32), []byte{9, 9, 9, 9}, false)
	f.Add([]byte{0xfd, 0, 0, 0x10}, []byte{0xfd, 0, 0, 0x99}, uint8(64), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xab, 0xcd}, true)
	f.Add([]byte{0xfd}, []byte{0xfe}, uint8(127), []byte{0xff}, true)
	f.Fuzz(func(t *testing.T, a, b []byte, bits uint8, host []byte, v6 bool) {
		total := 32
		if v6 {
			total = 128
		}
		n := int(bits) % (total + 1)
		from := netip.PrefixFrom(fuzzAddr(a, v6), n).Masked()
		to := netip.PrefixFrom(fuzzAddr(b, v6), n).Masked()
		mask := hostMask(n, total)
		h := new(big.Int).And(toInt(fuzzAddr(host, v6)), mask)
		x := fromInt(new(big.Int).Or(toInt(from.Addr()), h), v6)

		got, err := Translate(x, from, to)
		if err != nil {
			t.Fatalf("Translate(%s, %s, %s): %v", x, from, to, err)
		}
		if !to.Contains(got) {
			t.Fatalf("Translate(%s, %s, %s) = %s, outside the target", x, from, to, got)
		}
		if gh := new(big.Int).And(toInt(got), mask); gh.Cmp(h) != 0 {
			t.Fatalf("Translate(%s, %s, %s) = %s changed the host bits", x, from, to, got)
		}
		back, err := Translate(got, to, from)
		if err != nil || back != x {
			t.Fatalf("inverse of %s (%s → %s) = %s, %v; want %s", got, from, to, back, err, x)
		}
		m := Mapping{Original: from, Remapped: to}
		if l, err := m.ToLocal(x); err != nil || l != got {
			t.Fatalf("ToLocal(%s) = %s, %v; want %s", x, l, err, got)
		}
		if r, err := m.ToRemote(got); err != nil || r != x {
			t.Fatalf("ToRemote(%s) = %s, %v; want %s", got, r, err, x)
		}
		if n < total {
			if _, err := Translate(x, from, netip.PrefixFrom(to.Addr(), n+1).Masked()); err == nil {
				t.Fatalf("Translate across prefix lengths /%d and /%d succeeded", n, n+1)
			}
		}
	})
}

// fuzzPrefixes turns spec into prefixes near pool: each chunk gives host
// bits (laid over pool's network bits) and a prefix length.
func fuzzPrefixes(pool netip.Prefix, spec []byte) []netip.Prefix {
	v6 := pool.Addr().Is6()
	total := pool.Addr().BitLen()
	size := 5
	if v6 {
		size = 17
	}
	var out []netip.Prefix
	for i := 0; i+size <= len(spec) && len(out) < 16; i += size {
		chunk := spec[i : i+size]
		bits := int(chunk[size-1]) % (total + 1)
		base := toInt(pool.Addr())
		var a netip.Addr
		if chunk[size-1]&0x80 != 0 {
			a = fuzzAddr(chunk[:size-1], v6) // anywhere
		} else {
			h := new(big.Int).And(toInt(fuzzAddr(chunk[:size-1], v6)), hostMask(pool.Bits(), total))
			a = fromInt(base.Or(base, h), v6)
		}
		out = append(out, netip.PrefixFrom(a, bits).Masked())
	}
	return out
}

func FuzzAllocateDisjoint(f *testing.F) {
	f.Add([]byte{100, 64, 0, 0}, uint8(10), []byte{10, 200, 0, 0, 16, 0, 0, 0, 0, 16, 0, 1, 0, 0, 16}, []byte{16, 16, 24, 8, 30}, false)
	f.Add([]byte{100, 64, 0, 0}, uint8(26), []byte{0, 0, 0, 0, 28, 0, 0, 0, 32, 29}, []byte{28, 28, 28, 30, 32, 32, 32}, false)
	f.Add([]byte{255, 255, 255, 0}, uint8(24), []byte{0, 0, 0, 0, 25}, []byte{25, 25, 25}, false)
	f.Add([]byte{0xfd, 0, 0, 0xa}, uint8(48), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64}, []byte{64, 64, 60, 128}, true)
	f.Add([]byte{0xfd}, uint8(120), []byte{}, []byte{124, 124, 128, 0, 255}, true)
	f.Fuzz(func(t *testing.T, poolBytes []byte, poolBits uint8, reservedSpec, reqs []byte, v6 bool) {
		total := 32
		if v6 {
			total = 128
		}
		pool := netip.PrefixFrom(fuzzAddr(poolBytes, v6), int(poolBits)%(total+1)).Masked()
		reserved := fuzzPrefixes(pool, reservedSpec)
		taken := append([]netip.Prefix(nil), reserved...)
		if len(reqs) > 32 {
			reqs = reqs[:32]
		}
		for _, r := range reqs {
			bits := int(r) % (total + 1)
			got, err := AllocateCIDR(pool, bits, taken)
			small := bits >= pool.Bits() && bits-pool.Bits() <= 10
			if err != nil {
				if !errors.Is(err, ErrNoFreeCIDR) {
					t.Fatalf("AllocateCIDR(%s, /%d): unexpected error %v", pool, bits, err)
				}
				if small {
					if free, ok := lowestFree(pool, bits, taken); ok {
						t.Fatalf("AllocateCIDR(%s, /%d, %v) found nothing but %s is free", pool, bits, taken, free)
					}
				}
				continue
			}
			if got.Bits() != bits || got != got.Masked() || got.Bits() < pool.Bits() || !pool.Contains(got.Addr()) {
				t.Fatalf("AllocateCIDR(%s, /%d) = %s: not a /%d block of the pool", pool, bits, got, bits)
			}
			if q, ok := Overlap(got, taken); ok {
				t.Fatalf("AllocateCIDR(%s, /%d) = %s overlaps %s (taken: %v)", pool, bits, got, q, taken)
			}
			if small {
				if want, _ := lowestFree(pool, bits, taken); want != got {
					t.Fatalf("AllocateCIDR(%s, /%d, %v) = %s, want the lowest free block %s", pool, bits, taken, got, want)
				}
			}
			taken = append(taken, got)
		}
	})
}

// lowestFree finds the lowest free block by enumerating every block.
func lowestFree(pool netip.Prefix, bits int, taken []netip.Prefix) (netip.Prefix, bool) {
	total := pool.Addr().BitLen()
	step := new(big.Int).Lsh(big.NewInt(1), uint(total-bits))
	cur := toInt(pool.Addr())
	for range 1 << (bits - pool.Bits()) {
		cand := netip.PrefixFrom(fromInt(cur, pool.Addr().Is6()), bits)
		if _, ok := Overlap(cand, taken); !ok {
			return cand, true
		}
		cur.Add(cur, step)
	}
	return netip.Prefix{}, false
}

func FuzzAllocator(f *testing.F) {
	f.Add([]byte{10, 70, 0, 0}, uint8(29), []byte{0, 0, 0, 4, 31}, []byte{1, 2, 3, 0x81, 4, 5, 6, 7, 8, 1})
	f.Add([]byte{10, 70, 0, 0}, uint8(31), []byte{}, []byte{1, 2, 3, 0x82, 3})
	f.Add([]byte{255, 255, 255, 240}, uint8(28), []byte{0, 0, 0, 0, 30}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0x83, 3})
	f.Add([]byte{10, 70, 0, 0}, uint8(16), []byte{0, 0, 0, 0, 0x80 | 24}, []byte{1, 2})
	f.Fuzz(func(t *testing.T, cidrBytes []byte, cidrBits uint8, reservedSpec, ops []byte) {
		// IPv4 CIDRs of at most 64 addresses, so exhaustion can be checked.
		cidr := netip.PrefixFrom(fuzzAddr(cidrBytes, false), 26+int(cidrBits)%7).Masked()
		reserved := fuzzPrefixes(cidr, reservedSpec)
		a, err := NewAllocator(cidr, reserved...)
		if err != nil {
			t.Fatal(err)
		}
		usable := 0
		for x := cidr.Addr(); x.IsValid() && cidr.Contains(x); x = x.Next() {
			if a.usable(x) {
				if _, ok := Overlap(netip.PrefixFrom(x, 32), reserved); !ok {
					usable++
				}
			}
		}
		held := map[string]netip.Addr{}
		for _, o := range ops {
			key := fmt.Sprint(o & 0x3f)
			if o&0x80 != 0 {
				_, had := held[key]
				if a.Release(key) != had {
					t.Fatalf("Release(%q) disagrees with the model (held %v)", key, had)
				}
				delete(held, key)
				continue
			}
			got, err := a.Allocate(key)
			if err != nil {
				if !errors.Is(err, ErrExhausted) || len(held) != usable {
					t.Fatalf("Allocate(%q): %v with %d of %d usable addresses held", key, err, len(held), usable)
				}
				continue
			}
			if prev, ok := held[key]; ok && prev != got {
				t.Fatalf("Allocate(%q) = %s, but it held %s", key, got, prev)
			}
			if !cidr.Contains(got) || !a.usable(got) {
				t.Fatalf("Allocate(%q) = %s: not an allocatable address of %s", key, got, cidr)
			}
			if q, ok := Overlap(netip.PrefixFrom(got, 32), reserved); ok {
				t.Fatalf("Allocate(%q) = %s is inside reserved %s", key, got, q)
			}
			for k, x := range held {
				if x == got && k != key {
					t.Fatalf("Allocate(%q) = %s, already held by %q", key, got, k)
				}
			}
			held[key] = got
		}
		b, _ := NewAllocator(cidr, reserved...)
		if err := b.Restore(a.State()); err != nil {
			t.Fatalf("Restore(State()): %v", err)
		}
		if len(b.State()) != len(held) || a.Len() != len(held) {
			t.Fatalf("state has %d keys, restored %d, model %d", a.Len(), len(b.State()), len(held))
		}
		for k, x := range held {
			if y, ok := b.Lookup(k); !ok || y != x {
				t.Fatalf("restored %q = %s, want %s", k, y, x)
			}
		}
	})
}
