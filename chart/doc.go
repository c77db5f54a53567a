// Package chart holds the Helm chart of dummy-fuse-csi (Chart.yaml, values.yaml, templates/). Its only Go
// code is the chart's tests, which render the chart with the helm library for several value sets and check
// the decoded objects. .helmignore keeps the Go files out of the packaged chart.
package chart
