// Package charts holds Annex's Helm chart, charts/annex, embedded so that
// annexctl installs what the chart installs (internal/chart renders it).
package charts

import "embed"

// FS holds the chart's files under annex/.
//
//go:embed all:annex
var FS embed.FS
