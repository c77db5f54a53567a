// Package manifests holds the Kubernetes objects a user applies by hand next to the Helm chart (PV, PVC,
// workload pods, a Deployment, the scenario variants) and the kind cluster config. Its only Go code is the
// test that decodes every manifest strictly and checks them against the chart's defaults.
package manifests
