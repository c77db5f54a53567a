// Package version holds the build's version, stamped by the Makefile with -ldflags -X.
package version

// Version is overridden at link time: -X github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version.Version=...
var Version = "dev"
