package fusemode

import (
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/moby/sys/mountinfo"
)

// A connection that the plugin keeps while no server answers it does not fail: the kernel queues every request
// and waits for a reader, and a caller whose request a dead server had read waits uninterruptibly (D state:
// request_wait_answer in fs/fuse/dev.c), so neither kill -9 nor kubelet can end the workload. The holder bounds
// that wait: a connection whose requests wait while no server has answered it (steadily) for the limit is
// aborted through the kernel's control filesystem, so that its callers get ECONNABORTED (in flight) or
// ENOTCONN (afterwards) and can act, and kubelet can tear the pod down. The kernel's own request timeout
// (fs.fuse.default_request_timeout, max_request_timeout) cannot do it per connection: the server sets it in its
// INIT reply, which a successor must replay unchanged, and the sysctls apply to every FUSE mount of the node.

// DefaultUnservedLimit is how long requests may wait on a kept connection that no server answers before the
// holder aborts it, unless told otherwise (Options.UnservedLimit): far above the pause of a server's restart
// (milliseconds) and of a keeper's (a pod start), far below what a workload or kubelet should hang.
const DefaultUnservedLimit = 30 * time.Second

// checkUnservedLimit refuses a limit that means nothing (0 turns the abort off).
func checkUnservedLimit(limit time.Duration) error {
	if limit < 0 {
		return fmt.Errorf("a negative limit for unserved connections (%s); 0 turns the abort off", limit)
	}
	return nil
}

// stableServe is how long a server must answer a connection before the connection counts as served again: a
// server that crashes at once (a crash loop) hands every request straight back.
const stableServe = time.Second

// watchUnserved aborts the connections that the plugin holds (its own copy: those its records gave it or it
// mounted) on which requests wait while no server has answered steadily for limit; the checks run every
// tenth of the limit, at least once a second, until the holder is closed. limit <= 0 turns it off.
func (h *holder) watchUnserved(limit time.Duration) {
	if limit <= 0 {
		return
	}
	every := min(limit/10, time.Second)
	go func() {
		// A container's sysfs lacks the control filesystem that Waiting and Abort use.
		if err := fuseconn.MountControl(); err != nil {
			klog.ErrorS(err, "Connections that no server answers cannot be aborted: their callers wait until a server comes")
		}
		t := time.NewTicker(every)
		defer t.Stop()
		stuck := map[*keptConn]time.Time{} // since when requests have waited on an unserved connection
		last := time.Now()
		for {
			select {
			case <-h.done:
				return
			case now := <-t.C:
				h.checkUnserved(now, last, limit, stuck)
				last = now
			}
		}
	}()
}

// checkUnserved is one pass of watchUnserved at now, the previous one having been at last. A request seen
// waiting for the first time counts from the later of last and the moment the connection lost its server: it
// may have come in at any time since, so the abort comes no later than limit after it.
func (h *holder) checkUnserved(now, last time.Time, limit time.Duration, stuck map[*keptConn]time.Time) {
	type candidate struct {
		c     *keptConn
		id    uint32
		since time.Time
	}
	var cands []candidate
	h.mu.Lock()
	for _, c := range h.conns {
		// Only connections the plugin holds a copy of, and knows by number: never anybody else's.
		if c.dev == nil || c.id == 0 || c.ended || c.init == nil {
			continue
		}
		if len(c.servers) > 0 && now.Sub(c.servedAt) >= stableServe {
			c.unservedSince = time.Time{}
		}
		if !c.unservedSince.IsZero() {
			cands = append(cands, candidate{c, c.id, c.unservedSince})
		}
	}
	h.mu.Unlock()
	seen := map[*keptConn]bool{}
	for _, cd := range cands {
		// The number is the connection's only while its mount exists: once unmounted, the kernel may give it to
		// anybody's new FUSE mount although the plugin still holds the old descriptor.
		if _, ok, _ := connectionAt(cd.c.mountpoint, cd.id); !ok {
			continue
		}
		// Nothing waits: nobody hangs, and the connection may wait for its next server as long as it takes.
		if n, err := fuseconn.Waiting(cd.id); err == nil && n == 0 {
			continue
		}
		seen[cd.c] = true
		since, ok := stuck[cd.c]
		if !ok {
			since = last
			if cd.since.After(last) {
				since = cd.since
			}
			stuck[cd.c] = since
		}
		if now.Sub(since) >= limit {
			h.abortUnserved(cd.c, cd.id, now.Sub(since))
		}
	}
	for c := range stuck {
		if !seen[c] {
			delete(stuck, c)
		}
	}
}

// abortUnserved aborts c, whose requests waited for without a server, and tells every session that holds it
// that it is over.
func (h *holder) abortUnserved(c *keptConn, id uint32, waited time.Duration) {
	h.mu.Lock()
	if c.ended || c.id != id || h.conns[c.volume] != c {
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	if _, ok, _ := connectionAt(c.mountpoint, id); !ok {
		return // unmounted meanwhile: the number may be somebody else's now
	}
	if err := fuseconn.Abort(id); err != nil {
		klog.ErrorS(err, "Cannot abort a FUSE connection that no server answers; its callers keep waiting", "volumeID", c.volume, "connection", id)
		return
	}
	klog.InfoS("Aborted a FUSE connection that no server answered while requests waited: its callers get an error (ECONNABORTED, then ENOTCONN) and the mount is dead until it is staged again",
		"volumeID", c.volume, "mountpoint", c.mountpoint, "connection", id, "waited", waited.Round(time.Millisecond))
	h.mu.Lock()
	defer h.mu.Unlock()
	c.ended = true
	closeOnce(c.done)
	for _, s := range h.sessions {
		if s.holds[c.volume] {
			go func(s *keeperSession) { _ = s.conn.Send(handover.Msg{Kind: handover.Stop, Volume: c.volume}, nil) }(s)
		}
	}
	h.notifyLocked()
}

// connectionAt reports whether connection id is the mount on top of mountpoint in the plugin's mount table (its
// device is 0:id), with that top mount: the proof that the number still names the connection the plugin holds
// there. The number of an unmounted connection is free for the next FUSE mount of anyone on the node, even while
// the plugin holds the old descriptor.
func connectionAt(mountpoint string, id uint32) (*mountinfo.Info, bool, error) {
	top, err := mounts.Top(mountpoint)
	return top, err == nil && top != nil && top.Major == 0 && uint32(top.Minor) == id, err
}
