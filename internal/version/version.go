// Package version owns the Annex release string that every binary reports and
// that `annexctl install` records in the clusters it installs into.
package version

// Version is set at build time with
// -ldflags "-X github.com/annexhq/annex/internal/version.Version=vX.Y.Z".
var Version = "v0.1.0-dev"
