package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Env is what the runner hands a backend for one run: the run directory, the recorder of the evidence, and
// the log files the backend writes there (its artifacts, listed in the outcome under the names it chose).
type Env struct {
	// Dir is the run directory (absolute).
	Dir string
	// Rec records the run's evidence; the runner judges its snapshots.
	Rec *Recorder

	mu        sync.Mutex
	artifacts []string
}

// NewEnv returns the environment of a run in dir.
func NewEnv(dir string) (*Env, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, err
	}
	return &Env{Dir: abs, Rec: &Recorder{}}, nil
}

// Log creates the log file name in the run directory and lists it among the run's artifacts.
func (e *Env) Log(name string) (*LogFile, error) {
	f, err := os.Create(filepath.Join(e.Dir, name))
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	e.mu.Lock()
	e.artifacts = append(e.artifacts, name)
	e.mu.Unlock()
	return &LogFile{f: f}, nil
}

// Logs creates the named logs with Log, in order; on an error the ones created so far stay listed.
func (e *Env) Logs(names ...string) ([]*LogFile, error) {
	out := make([]*LogFile, len(names))
	for i, n := range names {
		var err error
		if out[i], err = e.Log(n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Artifacts are the names of the files the backend wrote into the run directory, in creation order.
func (e *Env) Artifacts() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.artifacts...)
}

// LogFile is a log of the run that several goroutines write lines into; a nil *LogFile discards them.
type LogFile struct {
	mu sync.Mutex
	f  *os.File
}

// WriteLine writes "prefix line\n" (or just the line when prefix is empty) as one write.
func (l *LogFile) WriteLine(prefix string, line []byte) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.f == nil:
	case prefix == "":
		fmt.Fprintf(l.f, "%s\n", line)
	default:
		fmt.Fprintf(l.f, "%s %s\n", prefix, line)
	}
}

// Printf writes a formatted line (a newline is added when missing).
func (l *LogFile) Printf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	l.WriteLine("", []byte(s))
}

// File is the open file, for a child process's stdout and stderr (each write(2) of the child is appended
// whole; nil after Close).
func (l *LogFile) File() *os.File {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f
}

// Name is the file's path.
func (l *LogFile) Name() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return ""
	}
	return l.f.Name()
}

// Close closes the file; later writes are dropped.
func (l *LogFile) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
