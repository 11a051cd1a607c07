// Package chart owns Annex's Helm chart (charts/annex, embedded) as annexctl
// uses it: it loads the chart and renders it offline with Helm's chart loader
// and template engine only — no release, no Secret, no lookup: what the chart
// would look up in the cluster, the caller decides and passes as values —
// and decodes what it renders into objects.
package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	helmchart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/annexhq/annex/charts"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/version"
)

// Dir is the chart's directory in charts.FS.
const Dir = "annex"

// ReleaseName is the release name templates see when annexctl renders.
const ReleaseName = "annex"

// Values are the chart values annexctl sets (charts/annex/values.yaml
// documents them); an empty string or nil keeps the chart's default.
type Values struct {
	ClusterID    string
	PodCIDR      string
	ServiceCIDR  string
	ExternalCIDR string
	// Agent deploys the agent (agent.enabled).
	Agent bool
	// Image is a full image reference (repository[:tag][@digest]), split
	// into image.repository, image.tag and image.digest.
	Image           string
	ImagePullPolicy string
	GatewayEndpoint string
	GatewayNode     string
	// AgentCPURequest, AgentMemoryRequest and AgentMemoryLimit are
	// agent.resources (quantities; empty: the chart's default).
	AgentCPURequest    string
	AgentMemoryRequest string
	AgentMemoryLimit   string
	// AllowedPriorityClasses are providerPolicy.allowedPriorityClasses.
	AllowedPriorityClasses []string
}

// Map returns the values as Helm takes them (JSON types only).
func (v Values) Map() map[string]any {
	agent := map[string]any{"enabled": v.Agent}
	// Helm merges these maps into the chart's defaults, key by key.
	set := func(m map[string]any, key, val string) {
		if val != "" {
			m[key] = val
		}
	}
	requests, limits := map[string]any{}, map[string]any{}
	set(requests, "cpu", v.AgentCPURequest)
	set(requests, "memory", v.AgentMemoryRequest)
	set(limits, "memory", v.AgentMemoryLimit)
	agent["resources"] = map[string]any{"requests": requests, "limits": limits}
	m := map[string]any{
		"agent":   agent,
		"gateway": map[string]any{"endpoint": v.GatewayEndpoint, "node": v.GatewayNode},
	}
	for key, val := range map[string]string{"clusterID": v.ClusterID, "podCIDR": v.PodCIDR, "serviceCIDR": v.ServiceCIDR, "externalCIDR": v.ExternalCIDR} {
		if val != "" {
			m[key] = val
		}
	}
	image := map[string]any{}
	if v.Image != "" {
		repo, tag, digest := SplitImage(v.Image)
		image["repository"], image["tag"], image["digest"] = repo, tag, digest
	}
	if v.ImagePullPolicy != "" {
		image["pullPolicy"] = v.ImagePullPolicy
	}
	if len(image) > 0 {
		m["image"] = image
	}
	if v.AllowedPriorityClasses != nil {
		pcs := make([]any, 0, len(v.AllowedPriorityClasses))
		for _, pc := range v.AllowedPriorityClasses {
			pcs = append(pcs, pc)
		}
		m["providerPolicy"] = map[string]any{"allowedPriorityClasses": pcs}
	}
	return m
}

// SplitImage splits an image reference into repository, tag and digest. A
// reference with neither tag nor digest gets the tag "latest", which is what
// the container runtime pulls for it (the chart would default to its
// appVersion).
func SplitImage(ref string) (repository, tag, digest string) {
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		ref, digest = ref[:i], ref[i+1:]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref, tag = ref[:i], ref[i+1:]
	}
	if tag == "" && digest == "" {
		tag = "latest"
	}
	return ref, tag, digest
}

// Load loads the embedded chart. Its appVersion becomes this binary's
// version (internal/version.Version, set at release time), which the chart
// records on the annex-system namespace and uses as the default image tag.
func Load() (*helmchart.Chart, error) {
	var files []*archive.BufferedFile
	err := fs.WalkDir(charts.FS, Dir, func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(charts.FS, name)
		if err != nil {
			return err
		}
		files = append(files, &archive.BufferedFile{Name: strings.TrimPrefix(name, Dir+"/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the embedded chart: %w", err)
	}
	ch, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("load the embedded chart: %w", err)
	}
	ch.Metadata.AppVersion = version.Version
	return ch, nil
}

// Template is what one template file rendered.
type Template struct {
	// Name is the file's path under templates/, such as "rbac/role.yaml".
	Name    string
	Objects []*unstructured.Unstructured
}

// Rendered is the chart rendered with some values.
type Rendered struct {
	// CRDs are the chart's crds/ (Helm's convention: not templated).
	CRDs []*unstructured.Unstructured
	// Templates are the rendered templates that hold objects, in file-name
	// order (NOTES.txt and the helpers are left out).
	Templates []Template
}

// Objects returns the objects of the templates whose name is name or, when
// name ends with "/", starts with it.
func (r *Rendered) Objects(name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, t := range r.Templates {
		if t.Name == name || strings.HasSuffix(name, "/") && strings.HasPrefix(t.Name, name) {
			out = append(out, t.Objects...)
		}
	}
	return out
}

// Render renders the embedded chart with v, checking them against its
// values.schema.json as Helm does.
func Render(ctx context.Context, v Values) (*Rendered, error) {
	return render(ctx, v.Map())
}

func render(ctx context.Context, values map[string]any) (*Rendered, error) {
	ch, err := Load()
	if err != nil {
		return nil, err
	}
	vals, err := jsonValues(values)
	if err != nil {
		return nil, err
	}
	top, err := chartutil.ToRenderValues(ch, vals, common.ReleaseOptions{Name: ReleaseName, IsInstall: true}, nil)
	if err != nil {
		return nil, fmt.Errorf("chart values: %w", err)
	}
	out, err := engine.Engine{}.RenderWithContext(ctx, ch, top)
	if err != nil {
		return nil, fmt.Errorf("render the chart: %w", err)
	}
	r := &Rendered{}
	for _, f := range ch.CRDObjects() {
		objs, err := cli.DecodeYAML(f.File.Data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Filename, err)
		}
		r.CRDs = append(r.CRDs, objs...)
	}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	prefix := ch.Name() + "/templates/"
	for _, name := range names {
		if path.Ext(name) != ".yaml" {
			continue // NOTES.txt
		}
		objs, err := cli.DecodeYAML([]byte(out[name]))
		if err != nil {
			return nil, fmt.Errorf("rendered %s: %w", name, err)
		}
		if len(objs) > 0 {
			r.Templates = append(r.Templates, Template{Name: strings.TrimPrefix(name, prefix), Objects: objs})
		}
	}
	return r, nil
}

// jsonValues makes m hold JSON types only, as the schema validator wants.
func jsonValues(m map[string]any) (map[string]any, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(data, &out)
}
