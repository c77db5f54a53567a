package dummyfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Conn serves one /dev/fuse connection with a bounded pool of workers. A worker is a plain loop: read a
// request from the device, let go-fuse's ProtocolServer call the filesystem, write the reply.
//
// Normally one worker does all the work: every extra thread blocked in read(2) makes things slower, because
// the kernel wakes the readers of a connection in turn (they wait on its input queue as exclusive waiters,
// first come first served: fuse_dev_do_read in the kernel's fs/fuse/dev.c), so each request would land on a
// thread whose caches are cold, and Go's scheduler has to find a P for each of them. A second worker only
// starts reading when the request being handled is slow: the worker that takes a request while no other
// worker is reading arms a timer (slowAfter), and if the timer fires before the reply is written, a parked
// worker is woken, or a new one started, up to the bound. A worker that finishes while another one is
// reading parks. So a slow backend (Options.ReadLatency) gets one worker per request in flight, and fast
// requests keep the one-thread loop.
//
// All workers read the one descriptor Conn was given, never a clone of it (FUSE_DEV_IOC_CLONE): the kernel
// keeps the requests a reader has taken but not answered on the processing queue of the device file it was
// read from, and ends them with ECONNABORTED when that file is closed (fuse_dev_release in fs/fuse/dev.c).
// On the shared descriptor they survive the death of this process as long as another process holds a dup of
// it, and a successor can ask the kernel to queue them again (see Takeover).
type Conn struct {
	fd      int
	ps      *fuse.ProtocolServer
	quick   *FS // answers the frequent requests without ps (FS.QuickReply); nil for any other filesystem
	bufSize int
	max     int
	log     *log.Logger // nil: the standard logger
	// resident makes each worker's request buffer resident when it is made (LargeRequests).
	resident bool

	// init is the handover record: the kernel's INIT request as read from the device, then our reply.
	init []byte

	reading atomic.Int32 // workers in (or about to enter) read(2)

	mu      sync.Mutex
	started int         // workers started so far (at most max)
	parked  []chan bool // parked workers; a send wakes one: true to work, false to quit
	ended   bool        // the connection ended: workers quit
	err     error       // the first device error
	wg      sync.WaitGroup
}

// Request and reply layout (include/uapi/linux/fuse.h).
const (
	opInit       = 26 // FUSE_INIT
	inHeaderLen  = 40 // sizeof(struct fuse_in_header)
	outHeaderLen = 16 // sizeof(struct fuse_out_header)
)

// DefaultWorkers bounds the requests a server handles at once unless told otherwise: enough that 16 readers
// of a slow backend (Options.ReadLatency) are all served at once. Workers are started when needed.
const DefaultWorkers = 16

// slowAfter is how long a request may keep the only reading worker busy before another one starts reading.
// Go's timers are coarse at this scale (up to about a millisecond when the process is idle), which is fine:
// fast requests take microseconds, a remote backend milliseconds.
const slowAfter = 200 * time.Microsecond

// NewConn wraps fd, a /dev/fuse descriptor (Conn does not close it), to serve fs negotiating mo with up to
// workers requests at once (DefaultWorkers when workers <= 0).
func NewConn(fd int, fs fuse.RawFileSystem, mo *fuse.MountOptions, workers int) *Conn {
	if workers <= 0 {
		workers = DefaultWorkers
	}
	// The kernel refuses reads shorter than max_write plus headers, and than 8 KiB. Of a worker's buffers
	// only the pages that requests and replies touch become resident.
	size := max(mo.MaxWrite, 8192) + 4096
	// Only for *FS itself: QuickReply stands for its methods, and a filesystem that wraps it (embedding it,
	// as tests do to hold reads) would be bypassed.
	quick, _ := fs.(*FS)
	large, _ := fs.(LargeRequests)
	return &Conn{fd: fd, ps: fuse.NewProtocolServer(fs, mo), quick: quick, bufSize: size, max: workers, log: mo.Logger,
		resident: large != nil && large.LargeRequests()}
}

// LargeRequests is implemented by a filesystem whose requests do not fit in a page: one that takes WRITEs
// (the writable relay). Its workers' request buffers are made resident when they are made, at the cost of
// their whole size in memory (see newWorker): otherwise the first large WRITE a fresh worker takes could be
// failed with EIO by a kill of this process while the kernel copies it.
type LargeRequests interface{ LargeRequests() bool }

// logger is where Conn logs what it survives: go-fuse's (MountOptions.Logger), else the standard logger, as
// go-fuse does.
func (c *Conn) logger() *log.Logger {
	if c.log != nil {
		return c.log
	}
	return log.Default()
}

// InitRecord returns the handover record once INIT was answered (nil before): the kernel's INIT request as
// read from the device followed by the reply this server wrote. A successor passes it to Takeover.
func (c *Conn) InitRecord() []byte { return c.init }

// Init answers the first request, which on a new connection is the kernel's INIT.
func (c *Conn) Init() error {
	w := c.newWorker()
	defer w.free()
	c.reading.Add(1)
	done, err := w.serveOne()
	switch {
	case err != nil:
		return fmt.Errorf("FUSE INIT: %w", err)
	case done:
		return errors.New("FUSE INIT: connection closed")
	case c.init == nil:
		return errors.New("FUSE INIT: first request was not INIT")
	}
	return nil
}

// Serve answers requests until the connection ends: nil when the filesystem was unmounted (ENODEV),
// otherwise the first device error.
func (c *Conn) Serve() error {
	c.mu.Lock()
	c.startLocked()
	c.mu.Unlock()
	c.wg.Wait()
	return c.err
}

// startLocked starts a worker; c.mu is held and c.started < c.max.
func (c *Conn) startLocked() {
	c.started++
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.newWorker().serve()
	}()
}

// grow lets one more worker read, unless one is reading already or all are busy.
func (c *Conn) grow() {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.ended || c.reading.Load() > 0:
	case len(c.parked) > 0:
		wake := c.parked[len(c.parked)-1]
		c.parked = c.parked[:len(c.parked)-1]
		wake <- true
	case c.started < c.max:
		c.startLocked()
	}
}

// park waits, unless the connection ended, until grow needs this worker again; false means quit.
func (c *Conn) park(wake chan bool) bool {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return false
	}
	if c.reading.Load() == 0 {
		c.mu.Unlock()
		return true // nobody reads: this worker is needed right away
	}
	c.parked = append(c.parked, wake)
	c.mu.Unlock()
	return <-wake
}

// end records why the connection ended and releases every parked worker.
func (c *Conn) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		c.ended, c.err = true, err
	}
	for _, wake := range c.parked {
		wake <- false
	}
	c.parked = nil
}

// worker is one request loop with its own buffers.
type worker struct {
	c       *Conn
	in, out []byte
	slow    *time.Timer // fires grow when a request keeps the only reader busy
	inIov   [1][]byte   // HandleRequest's arguments, kept here so that passing them allocates nothing
	outIov  [1][]byte
	wake    chan bool

	// Queue checks of the last reader (see checkBacklog).
	sinceCheck int  // requests taken since the last check
	backlog    bool // the last check found requests waiting

	mapping []byte // in and out when they were mapped (free unmaps it)
}

// newWorker returns a worker with buffers mapped outside the Go heap: they are large (the kernel wants room
// for a max_write WRITE and a READ of max_pages), but nearly all requests and replies fit in their first
// page, and untouched pages of an anonymous mapping take no memory. On the Go heap they would count towards
// the GC's goal and memory limit as if full.
func (c *Conn) newWorker() *worker {
	buf, err := unix.Mmap(-1, 0, 2*c.bufSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	mapped := err == nil
	if !mapped {
		buf = make([]byte, 2*c.bufSize) // out of address space is unlikely; the heap does as well
	}
	w := &worker{c: c, in: buf[:c.bufSize:c.bufSize], out: buf[c.bufSize:]}
	if mapped {
		w.mapping = buf
	}
	// The kernel copies a request into w.in after taking it off the queue, and a copy that faults while this
	// process is being killed ends the request with EIO for its caller instead of queueing it again
	// (fuse_dev_do_read in fs/fuse/dev.c; TestKillWhileTheKernelCopiesARequest): a successor killed right
	// after it took a connection over, whose buffers are all fresh, would cost a read. Nearly every request
	// of a read-only filesystem fits in the first page; a write makes it resident before the first read. A
	// filesystem that takes WRITEs gets the whole buffer made resident.
	w.in[0] = 0
	if w.c.resident {
		if err := unix.Madvise(w.in, unix.MADV_POPULATE_WRITE); err != nil { // Linux 5.14+
			for i := 0; i < len(w.in); i += 4096 {
				w.in[i] = 0
			}
		}
	}
	return w
}

// free unmaps the worker's buffers; the worker must not be used afterwards.
func (w *worker) free() {
	if w.mapping != nil {
		_ = unix.Munmap(w.mapping)
	}
}

func (w *worker) serve() {
	defer w.free()
	w.slow = time.AfterFunc(time.Hour, w.c.grow)
	w.slow.Stop()
	w.wake = make(chan bool, 1)
	for {
		w.c.reading.Add(1)
		done, err := w.serveOne()
		if done {
			w.c.end(err)
			return
		}
		if err != nil {
			// The kernel refused one reply and ended its request with EIO (fuse_dev_do_write in
			// fs/fuse/dev.c): that costs the one caller, never the connection's other callers.
			w.c.logger().Printf("dummyfs: %v; serving on", err)
		}
		// Park only while another worker reads and nothing waits: with a backlog every worker is busy.
		if w.c.reading.Load() > 0 && !w.c.pending() && !w.c.park(w.wake) {
			return
		}
	}
}

// checkBacklog runs after the only reading worker took req: when another request already waits behind a
// request that a caller waits for, two callers wait at once (several readers), and another worker starts
// reading, so that both cores answer. Requests nobody waits for do not count: open+read+close queues its
// asynchronous RELEASE right before the next OPEN, and a second worker there would only add a wake-up per
// operation. The check is a poll(2) of the device: on every request while callers queue up, otherwise on
// every backlogEvery-th, which keeps a single caller's loop at one system call more per eight requests.
func (w *worker) checkBacklog(req []byte) {
	if len(req) < inHeaderLen || asyncOp(binary.NativeEndian.Uint32(req[4:8])) {
		return
	}
	if !w.backlog {
		if w.sinceCheck++; w.sinceCheck < backlogEvery {
			return
		}
	}
	w.sinceCheck = 0
	if w.backlog = w.c.pending(); w.backlog {
		w.c.grow()
	}
}

// backlogEvery is how often a lone reader looks at the queue while no caller waits behind another.
const backlogEvery = 8

// asyncOp reports whether the kernel sends requests of this opcode without a caller waiting for the reply
// (include/uapi/linux/fuse.h: FORGET 2, RELEASE 18, RELEASEDIR 29, INTERRUPT 36, BATCH_FORGET 42).
func asyncOp(op uint32) bool { return op == 2 || op == 18 || op == 29 || op == 36 || op == 42 }

// pending reports whether requests wait in the connection's queue (poll(2) without blocking: fuse_dev_poll in
// fs/fuse/dev.c reports POLLIN while the pending list is not empty).
func (c *Conn) pending() bool {
	fds := [1]unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds[:], 0)
	return err == nil && n > 0 && fds[0].Revents&unix.POLLIN != 0
}

// serveOne reads and answers one request; done reports the end of the connection. The caller counted this
// worker in c.reading; serveOne uncounts it once the read returned.
func (w *worker) serveOne() (done bool, err error) {
	n, err := unix.Read(w.c.fd, w.in)
	last := w.c.reading.Add(-1) == 0
	switch {
	case err == nil:
	case errors.Is(err, unix.EINTR), errors.Is(err, unix.ENOENT):
		return false, nil // ENOENT: the request was interrupted and withdrawn before we read it
	case errors.Is(err, unix.ENODEV):
		return true, nil // unmounted
	default:
		return true, fmt.Errorf("read /dev/fuse: %w", err)
	}
	if last && w.slow != nil {
		w.slow.Reset(slowAfter)
		defer w.slow.Stop()
		w.checkBacklog(w.in[:n])
	}
	req := w.in[:n]
	if w.c.quick != nil {
		if m, ok := w.c.quick.QuickReply(req, w.out); ok {
			return writeReply(w.c.fd, w.out[:m])
		}
	}
	isInit := n >= inHeaderLen && binary.NativeEndian.Uint32(req[4:8]) == opInit
	w.inIov[0], w.outIov[0] = req, w.out
	m, st := w.c.ps.HandleRequest(w.inIov[:], w.outIov[:])
	if !st.Ok() && n >= inHeaderLen {
		// go-fuse could not handle it (and logged why): answer EIO rather than leave the caller waiting
		// forever. A request without a reply (FORGET) never fails this way.
		m = outHeaderLen
		binary.NativeEndian.PutUint32(w.out[0:4], outHeaderLen)
		eio := -int32(unix.EIO)
		binary.NativeEndian.PutUint32(w.out[4:8], uint32(eio))
		copy(w.out[8:16], req[8:16]) // unique
	}
	if m == 0 {
		return false, nil // FORGET and friends have no reply
	}
	if isInit && w.c.init == nil { // only Init, before the workers start, sees INIT
		w.c.init = append(append(make([]byte, 0, n+m), req...), w.out[:m]...)
	}
	return writeReply(w.c.fd, w.out[:m])
}

// writeReply writes a reply or notification to the device; done reports the end of the connection. A reply
// the kernel refuses (EINVAL: malformed, or not what the request expects) is an error that ends only its
// request, which the kernel fails with EIO.
func writeReply(fd int, b []byte) (done bool, err error) {
	for {
		_, err = unix.Write(fd, b)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return false, nil // ENOENT: nobody waits for this reply any more (interrupted request)
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENODEV):
			return true, nil
		case errors.Is(err, unix.EINVAL):
			return false, fmt.Errorf("the kernel refused a reply of %d bytes (%s): its caller got EIO", len(b), replyHeader(b))
		default:
			return true, fmt.Errorf("write /dev/fuse: %w", err)
		}
	}
}

// replyHeader describes a reply's header for a log line.
func replyHeader(b []byte) string {
	if len(b) < outHeaderLen {
		return "no header"
	}
	return fmt.Sprintf("len %d, error %d, unique %#x", binary.NativeEndian.Uint32(b[0:4]), int32(binary.NativeEndian.Uint32(b[4:8])), binary.NativeEndian.Uint64(b[8:16]))
}
