package kube

import (
	"context"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// helmRelease installs and uninstalls the chart with the helm library (no helm binary needed; values are a
// map, never a joined command line).
type helmRelease struct {
	getter    genericclioptions.RESTClientGetter
	chartDir  string
	name      string
	namespace string
	logf      func(format string, args ...any)
}

func (h *helmRelease) config() (*action.Configuration, error) {
	cfg := new(action.Configuration)
	if err := cfg.Init(h.getter, h.namespace, "secret", action.DebugLog(h.logf)); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}

// install installs the chart without waiting: the backend waits for the plugin itself, and fails fast when
// the plugin's image is not on the node.
func (h *helmRelease) install(ctx context.Context, vals map[string]any, timeout time.Duration) error {
	chrt, cfg, err := h.load()
	if err != nil {
		return err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName = h.name
	in.Namespace = h.namespace
	in.Timeout = timeout
	if _, err := in.RunWithContext(ctx, chrt, vals); err != nil {
		return fmt.Errorf("helm install %s (chart %s) in namespace %s: %w", h.name, h.chartDir, h.namespace, err)
	}
	return nil
}

// load loads the chart and the action configuration.
func (h *helmRelease) load() (*chart.Chart, *action.Configuration, error) {
	chrt, err := loader.Load(h.chartDir)
	if err != nil {
		return nil, nil, fmt.Errorf("load chart %s: %w", h.chartDir, err)
	}
	cfg, err := h.config()
	return chrt, cfg, err
}

// upgrade upgrades the release to vals (all of them: nothing is reused) without waiting: the backend waits for
// what it needs itself.
func (h *helmRelease) upgrade(ctx context.Context, vals map[string]any, timeout time.Duration) error {
	chrt, cfg, err := h.load()
	if err != nil {
		return err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = h.namespace
	up.Timeout = timeout
	if _, err := up.RunWithContext(ctx, h.name, chrt, vals); err != nil {
		return fmt.Errorf("helm upgrade %s (chart %s) in namespace %s: %w", h.name, h.chartDir, h.namespace, err)
	}
	return nil
}

// uninstall removes the release and waits until its objects are deleted; a missing release is fine.
func (h *helmRelease) uninstall(timeout time.Duration) error {
	cfg, err := h.config()
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.Wait = true
	un.Timeout = timeout
	un.IgnoreNotFound = true
	if _, err := un.Run(h.name); err != nil {
		return fmt.Errorf("helm uninstall %s in namespace %s: %w", h.name, h.namespace, err)
	}
	return nil
}

// mergeSets applies --set style assignments onto vals, as `helm install --set` does.
func mergeSets(vals map[string]any, sets []string) error {
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			return fmt.Errorf("chart value %q: %w", s, err)
		}
	}
	return nil
}
