package network

import (
	"fmt"
	"net/netip"
)

// Translate moves addr from CIDR from to CIDR to: it keeps addr's host bits
// and swaps the prefix. Both CIDRs must be of the same family and prefix
// length, and addr must be inside from. Translate(Translate(a, f, t), t, f)
// gives back a.
func Translate(addr netip.Addr, from, to netip.Prefix) (netip.Addr, error) {
	if !from.IsValid() || !to.IsValid() {
		return netip.Addr{}, fmt.Errorf("translate %s: invalid CIDR (%s → %s)", addr, from, to)
	}
	if from.Bits() != to.Bits() || from.Addr().Is4() != to.Addr().Is4() {
		return netip.Addr{}, fmt.Errorf("translate %s: %s and %s differ in family or prefix length", addr, from, to)
	}
	if !from.Contains(addr) {
		return netip.Addr{}, fmt.Errorf("translate %s: address not in %s", addr, from)
	}
	a, t := addrBytes(addr), addrBytes(to.Masked().Addr())
	for i := range from.Bits() {
		bit := byte(0x80) >> (i % 8)
		a[i/8] = a[i/8]&^bit | t[i/8]&bit
	}
	return addrFrom(a), nil
}

// Mapping is how one cluster sees one CIDR of a remote cluster: Original is
// the CIDR in the remote cluster's own view, Remapped the CIDR it is mapped to
// in this cluster's view, or the zero Prefix when it is used as it is.
type Mapping struct {
	Original netip.Prefix
	Remapped netip.Prefix
}

// ParseMapping parses an original CIDR and its remapping ("" for none), as
// they are written in a NetworkConfiguration.
func ParseMapping(original, remapped string) (Mapping, error) {
	o, err := ParseCIDR(original)
	if err != nil {
		return Mapping{}, err
	}
	m := Mapping{Original: o}
	if remapped == "" {
		return m, nil
	}
	if m.Remapped, err = ParseCIDR(remapped); err != nil {
		return Mapping{}, err
	}
	if o.Bits() != m.Remapped.Bits() || o.Addr().Is4() != m.Remapped.Addr().Is4() {
		return Mapping{}, fmt.Errorf("%s is remapped to %s: family and prefix length must be equal", o, m.Remapped)
	}
	return m, nil
}

// IsRemapped says whether the CIDR is remapped.
func (m Mapping) IsRemapped() bool { return m.Remapped.IsValid() }

// View returns the CIDR as this cluster sees it.
func (m Mapping) View() netip.Prefix {
	if m.IsRemapped() {
		return m.Remapped
	}
	return m.Original
}

// ToLocal translates an address from the remote cluster's own view into this
// cluster's view.
func (m Mapping) ToLocal(addr netip.Addr) (netip.Addr, error) {
	if !m.IsRemapped() {
		if !m.Original.Contains(addr) {
			return netip.Addr{}, fmt.Errorf("translate %s: address not in %s", addr, m.Original)
		}
		return addr, nil
	}
	return Translate(addr, m.Original, m.Remapped)
}

// ToRemote translates an address from this cluster's view back into the
// remote cluster's own view; it is the inverse of ToLocal.
func (m Mapping) ToRemote(addr netip.Addr) (netip.Addr, error) {
	if !m.IsRemapped() {
		return m.ToLocal(addr)
	}
	return Translate(addr, m.Remapped, m.Original)
}

// String is "original→remapped", or the original alone when not remapped.
func (m Mapping) String() string {
	if !m.IsRemapped() {
		return m.Original.String()
	}
	return m.Original.String() + "→" + m.Remapped.String()
}
