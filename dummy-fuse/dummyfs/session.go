package dummyfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

// ServeSession serves every FUSE connection that the other end of session (a keeper) hands over, each with its
// own Conn, in this one process: a server per connection would cost a Go runtime per volume. A Serve message
// without a handover record is a new connection whose INIT is still queued (answered as Mount does); one with
// a record is taken over (Takeover: INIT replayed, lost requests resent). Each is answered with Served (its
// record, this process and its version) once it is served, or Ended with the reason it could not be; Ended
// also reports a connection that ends later (unmounted, aborted).
//
// It returns when ctx ends (connections stay mounted: their other holders keep them) or the session ends (its
// keeper is gone, so nobody would hand this process anything any more, nor restart it); a broken message ends
// it with an error. logw gets a line per connection served or ended.
func ServeSession(ctx context.Context, session *handover.Conn, opts Options, logw io.Writer) error {
	return ServeSessionWith(ctx, session, opts, nil, logw)
}

// SessionFS gives a session server the filesystem of each connection instead of Options.FS: the relay-keeper
// mode relays each volume to its own backend, whose root arrives in Backend messages.
type SessionFS interface {
	// Backend takes f, the root of volume's backend (the receiver owns it).
	Backend(volume string, f *os.File)
	// FS returns the filesystem that serves volume's connection, and what ends it once the connection is
	// over; fresh says the connection is new (no predecessor served it: nothing of one may be loaded).
	FS(volume string, fresh bool) (fuse.RawFileSystem, func(), error)
}

// ServeSessionWith is ServeSession with each connection's filesystem from fss (nil: Options.FS, as
// ServeSession).
func ServeSessionWith(ctx context.Context, session *handover.Conn, opts Options, fss SessionFS, logw io.Writer) error {
	s := &sessionServer{session: session, opts: opts, fss: fss, logw: logw, served: map[string]*Server{}}
	recvd := make(chan error, 1)
	go func() { recvd <- s.receive() }()
	select {
	case <-ctx.Done():
		session.Close()
		<-recvd
		return nil
	case err := <-recvd:
		if errors.Is(err, io.EOF) {
			s.logf("the keeper closed the session; exiting (the connections stay with their other holders)")
			return nil
		}
		return err
	}
}

type sessionServer struct {
	session *handover.Conn
	opts    Options
	fss     SessionFS
	logw    io.Writer

	mu     sync.Mutex
	served map[string]*Server // by volume
}

// receive handles messages until the session ends.
func (s *sessionServer) receive() error {
	for {
		m, f, err := s.session.Recv()
		if err != nil {
			return err
		}
		if m.Kind == handover.Backend && s.fss != nil && f != nil {
			s.fss.Backend(m.Volume, f)
			continue
		}
		if f != nil && m.Kind != handover.Serve {
			f.Close()
		}
		if m.Kind != handover.Serve {
			s.logf("ignoring a %s message about %q: this server only takes connections (serve)", m.Kind, m.Volume)
			continue
		}
		if err := s.serve(m, f); err != nil {
			return err
		}
	}
}

// serve starts serving f for m.Volume and reports the outcome to the keeper; only a failure to report is an
// error (the session is broken).
func (s *sessionServer) serve(m handover.Msg, f *os.File) error {
	s.mu.Lock()
	srv := s.served[m.Volume]
	s.mu.Unlock()
	if srv != nil {
		// Already served here: this server keeps the descriptor it has; the copy goes.
		f.Close()
		return s.reportServed(m.Volume, srv, "already served")
	}
	// The Server owns a raw descriptor and closes it when it stops; f's own would be closed by the GC.
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return s.reportEnded(m.Volume, fmt.Errorf("dup: %w", err))
	}
	opts, end := s.opts, func() {}
	if s.fss != nil {
		if opts.FS, end, err = s.fss.FS(m.Volume, len(m.Init) == 0); err != nil {
			unix.Close(fd)
			return s.reportEnded(m.Volume, err)
		}
	}
	how := "answered its INIT"
	if len(m.Init) == 0 {
		srv, err = Mount(fmt.Sprintf("/dev/fd/%d", fd), opts)
	} else {
		srv, err = Takeover(fd, m.Init, opts)
		how = "took it over"
		if srv != nil && srv.Resent() {
			how += ", asked the kernel to resend what the predecessor had read"
		}
	}
	if err != nil { // Mount and Takeover closed the descriptor
		end()
		return s.reportEnded(m.Volume, err)
	}
	s.mu.Lock()
	s.served[m.Volume] = srv
	s.mu.Unlock()
	go func() { s.watch(m.Volume, srv); end() }()
	return s.reportServed(m.Volume, srv, how)
}

// watch reports the end of a connection.
func (s *sessionServer) watch(volume string, srv *Server) {
	err := srv.Wait()
	s.mu.Lock()
	delete(s.served, volume)
	s.mu.Unlock()
	reason := handover.ReasonUnmounted
	if err != nil {
		reason = err.Error()
	}
	_ = s.reportEnded(volume, errors.New(reason))
}

func (s *sessionServer) reportServed(volume string, srv *Server, how string) error {
	s.logf("serves volume %s (%s)", volume, how)
	return s.session.Send(handover.Msg{Kind: handover.Served, Volume: volume, Init: srv.InitRecord(), PID: os.Getpid(), Version: version.Version}, nil)
}

func (s *sessionServer) reportEnded(volume string, err error) error {
	s.logf("volume %s: %v", volume, err)
	return s.session.Send(handover.Msg{Kind: handover.Ended, Volume: volume, Reason: clipReason(err.Error())}, nil)
}

func (s *sessionServer) logf(format string, a ...any) {
	fmt.Fprintf(s.logw, "%s dummy-fuse %s pid %d: %s\n", time.Now().UTC().Format(time.RFC3339Nano), version.Version, os.Getpid(), fmt.Sprintf(format, a...))
}

func clipReason(s string) string {
	const max = 512
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
