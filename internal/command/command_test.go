package command

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code int
		out  string
	}{
		{"nil", nil, 0, ""},
		{"help", flag.ErrHelp, 0, ""},
		{"usage", Usagef("need %d arguments", 1), 2, "prog: need 1 arguments\nRun 'prog --help' for usage.\n"},
		{"exit", &ExitError{Code: 3, Err: errors.New("boom")}, 3, "prog: boom\n"},
		{"silent exit", &ExitError{Code: 1}, 1, ""},
		{"failure", errors.New("open /x: denied"), 1, "prog: open /x: denied\n"},
	} {
		var buf bytes.Buffer
		if got := Code("prog", tc.err, &buf); got != tc.code || buf.String() != tc.out {
			t.Errorf("%s: Code = %d, %q; want %d, %q", tc.name, got, buf.String(), tc.code, tc.out)
		}
	}
}

func TestParse(t *testing.T) {
	fs := flag.NewFlagSet("prog", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("n", 0, "")
	if err := Parse(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	err := Parse(fs, []string{"-n", "x"})
	var buf bytes.Buffer
	if Code("prog", err, &buf) != 2 || buf.Len() != 0 {
		t.Errorf("bad flag: %v (printed %q); want exit 2 and nothing printed again", err, buf.String())
	}
	if !strings.Contains(err.Error(), "invalid value") {
		t.Errorf("bad flag error %q does not say why", err)
	}
}
