package fuseserver_test

import (
	"flag"
	"io"
	"os"
)

func newFlagSet() *flag.FlagSet {
	fl := flag.NewFlagSet("test", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	return fl
}

func writeFile(path string) error { return os.WriteFile(path, []byte("x"), 0o644) }
